"""Drives `warden mcp` with the official MCP Python SDK (`mcp` on PyPI) as a client would.

Usage: python mcp_client.py SCENARIO_JSON
SCENARIO_JSON is {"command", "args", "env", "mode" ("auto": server/discover then the stateless
revision, "legacy": the initialize handshake), "repo", "question"}; the model's fourth reply must
take longer than two seconds (a question the client abandons). Prints one JSON object with
what the client saw; the Rust test (crates/cli/tests/suite/mcp.rs) makes the assertions.
"""

import asyncio
import json
import sys

from mcp import Client, StdioServerParameters


def tool_result(result):
    return {
        "is_error": bool(result.is_error),
        "text": "".join(block.text for block in result.content if getattr(block, "type", "") == "text"),
        "structured": result.structured_content,
    }


async def main(scenario):
    server = StdioServerParameters(
        command=scenario["command"], args=scenario["args"], env=scenario["env"]
    )
    report = {}
    async with Client(server, mode=scenario["mode"], read_timeout_seconds=120) as client:
        report["protocol_version"] = client.protocol_version
        listed = await client.list_tools()
        report["tools"] = [
            {"name": tool.name, "input_schema": tool.input_schema} for tool in listed.tools
        ]

        progress = []

        async def on_progress(value, total, message):
            progress.append({"progress": value, "total": total, "message": message})

        ask = await client.call_tool(
            "ask",
            {"repos": [scenario["repo"]], "question": scenario["question"]},
            progress_callback=on_progress,
        )
        report["ask"] = tool_result(ask)
        report["progress"] = progress

        task_id = (ask.structured_content or {}).get("task_id")
        if task_id:
            report["task_status"] = tool_result(await client.call_tool("task_status", {"task_id": task_id}))
            report["task_result"] = tool_result(await client.call_tool("task_result", {"task_id": task_id}))
        report["list_repos"] = tool_result(await client.call_tool("list_repos", {}))
        report["unknown_argument"] = tool_result(
            await client.call_tool(
                "ask", {"repos": [scenario["repo"]], "question": "why?", "approve": True}
            )
        )
        report["unknown_repo"] = tool_result(
            await client.call_tool("ask", {"repos": ["nowhere"], "question": "why?"})
        )
        # A request the client gives up on is cancelled (`notifications/cancelled`), and so is its
        # task: the model's next reply is scripted to take far longer than this timeout.
        try:
            await client.call_tool(
                "ask", {"repos": [scenario["repo"]], "question": "and the delay?"}, read_timeout_seconds=2
            )
            report["abandoned"] = "answered"
        except Exception as error:
            report["abandoned"] = f"gave up: {type(error).__name__}"
        # A round trip after the cancellation, so the server has read it before stdin closes.
        await client.call_tool("list_repos", {})
        await asyncio.sleep(1)
        try:
            await client.call_tool("approve", {"id": "apr_1", "hash": "0" * 64})
            report["approve"] = "accepted"
        except Exception as error:  # a JSON-RPC error: no such tool
            report["approve"] = f"refused: {error}"
    print(json.dumps(report))


if __name__ == "__main__":
    asyncio.run(main(json.loads(sys.argv[1])))
