//! Size caps: a compatible server sending an endless body, an endless SSE line, an endless
//! stream of small events or an endless error body gets a bounded read and a model error
//! naming the cap, never the client's memory. The server is raw TCP on loopback, and stops by
//! itself after a bound far past the caps, so a client that does not stop fails the test
//! (with what it read) instead of hanging.

use super::*;
use std::sync::atomic::{AtomicUsize, Ordering};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

/// The server gives up after this much of a body: far past every cap.
const SERVER_LIMIT: usize = 160 << 20;

/// An HTTP server that answers each request with `head` (status line and headers, ending in
/// an empty line), then `prefix`, then `chunk` over and over until the client hangs up or
/// `SERVER_LIMIT` is reached.
struct Endless {
    url: String,
    requests: Arc<AtomicUsize>,
    /// The most bytes written to one connection.
    written: Arc<AtomicUsize>,
}

impl Endless {
    async fn start(head: &str, prefix: &str, chunk: &str) -> Endless {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let requests = Arc::new(AtomicUsize::new(0));
        let written = Arc::new(AtomicUsize::new(0));
        let (head, prefix) = (head.to_string(), prefix.to_string());
        let chunk = chunk.repeat((64 << 10) / chunk.len().max(1) + 1);
        let (count, most) = (Arc::clone(&requests), Arc::clone(&written));
        tokio::spawn(async move {
            loop {
                let Ok((mut socket, _)) = listener.accept().await else {
                    return;
                };
                let (head, prefix, chunk) = (head.clone(), prefix.clone(), chunk.clone());
                let (count, most) = (Arc::clone(&count), Arc::clone(&most));
                tokio::spawn(async move {
                    read_request(&mut socket).await;
                    count.fetch_add(1, Ordering::SeqCst);
                    let mut sent = 0;
                    if socket.write_all(head.as_bytes()).await.is_err()
                        || socket.write_all(prefix.as_bytes()).await.is_err()
                    {
                        return;
                    }
                    while sent < SERVER_LIMIT {
                        if socket.write_all(chunk.as_bytes()).await.is_err() {
                            break;
                        }
                        sent += chunk.len();
                    }
                    most.fetch_max(sent, Ordering::SeqCst);
                });
            }
        });
        Endless {
            url,
            requests,
            written,
        }
    }
}

/// Reads one request: headers, then `content-length` bytes of body.
async fn read_request(socket: &mut tokio::net::TcpStream) {
    let mut seen = Vec::new();
    let mut buffer = [0u8; 8192];
    loop {
        let Ok(n) = socket.read(&mut buffer).await else {
            return;
        };
        if n == 0 {
            return;
        }
        seen.extend_from_slice(&buffer[..n]);
        let Some(end) = seen.windows(4).position(|w| w == b"\r\n\r\n") else {
            continue;
        };
        let head = String::from_utf8_lossy(&seen[..end]).to_ascii_lowercase();
        let length: usize = head
            .lines()
            .find_map(|line| line.strip_prefix("content-length:"))
            .and_then(|value| value.trim().parse().ok())
            .unwrap_or(0);
        if seen.len() >= end + 4 + length {
            return;
        }
    }
}

fn config(provider: &str, url: &str, stream: bool) -> ModelConfig {
    let mut config = match provider {
        "openai" => ModelConfig::openai("gpt-5-mini"),
        _ => ModelConfig::anthropic("claude-sonnet-4-5"),
    };
    config.base_url = match provider {
        "openai" => format!("{url}/v1"),
        _ => format!("{url}/"),
    };
    config.api_key = Some(OPENAI_KEY.to_string());
    config.stream = stream;
    config.request_timeout = Duration::from_secs(60);
    config.retry = fast_retries(2);
    config
}

const OK_JSON: &str =
    "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\nconnection: close\r\n\r\n";
const OK_SSE: &str =
    "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nconnection: close\r\n\r\n";

/// The call fails for good (one request, no retry) with a protocol error naming `cap`.
async fn check_refused(server: &Endless, config: ModelConfig, cap: &str) {
    let (result, _) = complete(&model(config)).await;
    let message = match result {
        Err(ModelError::Protocol { message }) => message,
        other => panic!("expected a protocol error, got {other:?}"),
    };
    assert!(message.contains(cap), "{message}");
    assert_eq!(server.requests.load(Ordering::SeqCst), 1);
    // The client hung up long before the server would have stopped.
    wait_for_hang_up(server).await;
}

async fn wait_for_hang_up(server: &Endless) {
    for _ in 0..200 {
        let written = server.written.load(Ordering::SeqCst);
        if written > 0 {
            assert!(written < SERVER_LIMIT, "the client read everything");
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("the server is still writing: the client did not hang up");
}

#[tokio::test]
async fn an_endless_response_body_is_cut_at_the_cap() {
    for provider in ["openai", "anthropic"] {
        let server = Endless::start(OK_JSON, "{\"choices\":[", "[[[[[[[[").await;
        check_refused(&server, config(provider, &server.url, false), "32 MiB cap").await;
    }
}

#[tokio::test]
async fn a_body_announced_past_the_cap_is_not_read() {
    let head = "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 1099511627776\r\n\r\n";
    let server = Endless::start(head, "", "        ").await;
    check_refused(&server, config("openai", &server.url, false), "32 MiB cap").await;
}

#[tokio::test]
async fn an_endless_stream_line_is_cut_at_the_event_cap() {
    for provider in ["openai", "anthropic"] {
        let server = Endless::start(OK_SSE, "data: {\"a\":\"", "aaaaaaaa").await;
        check_refused(&server, config(provider, &server.url, true), "8 MiB cap").await;
    }
}

#[tokio::test]
async fn an_endless_stream_of_events_is_cut_at_the_response_cap() {
    let chunk = format!(
        "data: {}\n\n",
        json!({"choices": [{"index": 0, "delta": {"content": "x".repeat(16 << 10)}}]})
    );
    let server = Endless::start(OK_SSE, "", &chunk).await;
    check_refused(&server, config("openai", &server.url, true), "32 MiB cap").await;
}

#[tokio::test]
async fn an_endless_stream_of_tiny_events_is_cut_at_the_event_count_cap() {
    let ping = "event: ping\ndata: {\"type\": \"ping\"}\n\n";
    let server = Endless::start(OK_SSE, "", ping).await;
    check_refused(
        &server,
        config("anthropic", &server.url, true),
        "100000-event cap",
    )
    .await;
}

#[tokio::test]
async fn an_endless_error_body_is_cut_and_still_classified_by_its_status() {
    // 500 is retried (two attempts here), each reading at most the error cap.
    let head = "HTTP/1.1 500 Internal Server Error\r\ncontent-type: text/plain\r\nconnection: close\r\n\r\n";
    let server = Endless::start(head, "", "overloaded ").await;
    let (result, events) = complete(&model(config("openai", &server.url, false))).await;
    match result {
        Err(ModelError::Exhausted { attempts, message }) => {
            assert_eq!(attempts, 2);
            assert!(message.contains("http 500"), "{message}");
            assert!(message.contains("64 KiB cap"), "{message}");
        }
        other => panic!("expected exhausted retries, got {other:?}"),
    }
    assert_eq!(events.retries().len(), 1);
    assert_eq!(server.requests.load(Ordering::SeqCst), 2);
    wait_for_hang_up(&server).await;

    // 401 is final, and the fallback rule still sees the status.
    let head =
        "HTTP/1.1 401 Unauthorized\r\ncontent-type: application/json\r\nconnection: close\r\n\r\n";
    let server = Endless::start(head, "{\"error\":{\"message\":\"", "no key ").await;
    let (result, _) = complete(&model(config("openai", &server.url, false))).await;
    match result {
        Err(ModelError::Permanent { status, message }) => {
            assert_eq!(status, Some(401));
            assert!(message.contains("64 KiB cap"), "{message}");
        }
        other => panic!("expected a permanent refusal, got {other:?}"),
    }
    wait_for_hang_up(&server).await;
}
