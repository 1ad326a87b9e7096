"""Drives Warden's MCP server with the official MCP Python SDK (`mcp` on PyPI) as a client would:
`warden mcp` over stdio, or `/mcp` on `warden serve` over Streamable HTTP with a bearer token.

Usage: python mcp_client.py SCENARIO_JSON
SCENARIO_JSON is {"command", "args", "env"} (stdio) or {"url", "token"} (Streamable HTTP), with
"mode" ("auto": server/discover then the stateless revision, "legacy": the initialize
handshake), "repo", "question", "abandon" (stdio: the model's fourth reply must take longer than
two seconds, a question the client abandons) and "viewer" (only what a read-only token tries).
Prints one JSON object with what the client saw; the Rust tests (crates/cli/tests/suite/mcp.rs,
mcp_http.rs) make the assertions.
"""

import asyncio
import json
import sys

from mcp import Client, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client


def tool_result(result):
    return {
        "is_error": bool(result.is_error),
        "text": "".join(block.text for block in result.content if getattr(block, "type", "") == "text"),
        "structured": result.structured_content,
    }


async def code_tools(client, repo, report):
    """The read-only code tools, each naming the commit it read."""
    report["read_file"] = tool_result(
        await client.call_tool("read_file", {"repo": repo, "path": "src/lib.rs", "start_line": 31, "end_line": 33})
    )
    report["search"] = tool_result(await client.call_tool("search", {"repo": repo, "pattern": "fn retry_with_backoff"}))
    report["list_dir"] = tool_result(await client.call_tool("list_dir", {"repo": repo}))
    report["read_outside"] = tool_result(await client.call_tool("read_file", {"repo": repo, "path": "../../etc/passwd"}))
    report["read_bad_rev"] = tool_result(
        await client.call_tool("read_file", {"repo": repo, "path": "src/lib.rs", "rev": "no-such-branch"})
    )


async def main(scenario):
    if "url" in scenario:
        http = create_mcp_http_client(headers={"Authorization": f"Bearer {scenario['token']}"})
        server = streamable_http_client(scenario["url"], http_client=http)
    else:
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
        if scenario.get("viewer"):
            report["ask"] = tool_result(
                await client.call_tool("ask", {"repos": [scenario["repo"]], "question": scenario["question"]})
            )
            await code_tools(client, scenario["repo"], report)
            print(json.dumps(report))
            return

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
        await code_tools(client, scenario["repo"], report)
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
        if scenario.get("abandon", True):
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
