//! The egress proxy against real sockets: local servers stand in for registries, a table
//! resolver decides what a name resolves to.

use super::*;
use std::collections::HashMap;
use std::io::BufRead;

fn rule(raw: &str) -> HostRule {
    HostRule::parse(raw, false).unwrap()
}

fn private_rule(raw: &str) -> HostRule {
    HostRule::parse(raw, true).unwrap()
}

/// A resolver answering from `table` (name → addresses), the port filled in.
fn table(entries: &[(&str, &[&str])]) -> Resolver {
    let map: HashMap<String, Vec<IpAddr>> = entries
        .iter()
        .map(|(name, ips)| {
            (
                name.to_string(),
                ips.iter().map(|ip| ip.parse().unwrap()).collect(),
            )
        })
        .collect();
    Arc::new(move |host, port| match map.get(host) {
        Some(ips) => Ok(ips.iter().map(|ip| SocketAddr::new(*ip, port)).collect()),
        None => Err(io::Error::new(io::ErrorKind::NotFound, "no such host")),
    })
}

fn settings(allow: &[&str], private: &[&str]) -> EgressSettings {
    EgressSettings {
        allow: allow.iter().map(|r| rule(r)).collect(),
        allow_private: private.iter().map(|r| private_rule(r)).collect(),
        ..EgressSettings::default()
    }
}

#[test]
fn allow_list_entries_are_names_domains_or_the_operators_addresses() {
    assert_eq!(rule("Index.Crates.IO").to_string(), "index.crates.io");
    assert_eq!(rule("*.crates.io").to_string(), "*.crates.io");
    assert_eq!(rule("registry.corp:8443").to_string(), "registry.corp:8443");
    assert_eq!(private_rule("10.0.0.5:8081").to_string(), "10.0.0.5:8081");
    assert_eq!(private_rule("[::1]:4873").to_string(), "[::1]:4873");
    for bad in [
        "",
        " crates.io",
        "https://crates.io",
        "crates.io/index",
        "user@crates.io",
        "*.io.",
        "*",
        "*.com",
        "crates.io:0",
        "-bad.example",
        "a..b",
    ] {
        assert!(HostRule::parse(bad, true).is_err(), "{bad:?} accepted");
    }
    // An IP literal is the operator's own host: never a public entry.
    let error = HostRule::parse("93.184.216.34", false).unwrap_err();
    assert!(error.contains("allow_private"), "{error}");
    assert!(HostRule::parse("*.10.0.0.1", true).is_err());
}

#[test]
fn a_rule_matches_its_name_its_subdomains_and_its_ports() {
    let exact = rule("crates.io");
    assert!(exact.matches("crates.io", 443) && exact.matches("crates.io", 80));
    assert!(!exact.matches("crates.io", 8443));
    assert!(!exact.matches("index.crates.io", 443));
    assert!(!exact.matches("evilcrates.io", 443));
    let domain = rule("*.crates.io");
    assert!(domain.matches("static.crates.io", 443));
    assert!(domain.matches("a.b.crates.io", 443));
    assert!(!domain.matches("crates.io", 443));
    assert!(!domain.matches("evilcrates.io", 443));
    assert!(!domain.matches(".crates.io", 443));
    let port = rule("registry.corp:8443");
    assert!(port.matches("registry.corp", 8443));
    assert!(!port.matches("registry.corp", 443));
}

#[test]
fn routes_refuse_unlisted_hosts_literals_and_private_resolutions() {
    let policy = EgressPolicy::with_resolver(
        settings(&["index.crates.io", "rebind.example", "mixed.example"], &[]),
        table(&[
            ("index.crates.io", &["151.101.2.137"]),
            ("rebind.example", &["127.0.0.1", "169.254.169.254"]),
            ("mixed.example", &["10.0.0.7", "93.184.216.34"]),
        ]),
    );
    assert_eq!(
        policy.route("Index.Crates.IO.", 443).unwrap(),
        Route::Direct(vec!["151.101.2.137:443".parse().unwrap()])
    );
    let refused = |host: &str, port: u16, expect: &str| {
        let error = policy.route(host, port).unwrap_err();
        assert!(error.contains(expect), "{host}: {error}");
    };
    refused("evil.example", 443, "not on the egress allow-list");
    refused("index.crates.io", 22, "not on the egress allow-list");
    refused("151.101.2.137", 443, "is an IP address");
    refused("[::1]", 443, "is an IP address");
    refused("rebind.example", 443, "no public address");
    refused("rebind.example", 443, "169.254.169.254");
    // Only the public address of a mixed answer is ever dialled.
    assert_eq!(
        policy.route("mixed.example", 443).unwrap(),
        Route::Direct(vec!["93.184.216.34:443".parse().unwrap()])
    );
}

#[test]
fn the_operators_private_hosts_and_upstream_are_admitted_as_configured() {
    let private = EgressPolicy::with_resolver(
        settings(&[], &["mirror.lan:8081", "10.0.0.5:8081"]),
        table(&[("mirror.lan", &["10.0.0.9"])]),
    );
    assert_eq!(
        private.route("mirror.lan", 8081).unwrap(),
        Route::Direct(vec!["10.0.0.9:8081".parse().unwrap()])
    );
    assert_eq!(
        private.route("10.0.0.5", 8081).unwrap(),
        Route::Direct(vec!["10.0.0.5:8081".parse().unwrap()])
    );
    assert!(private.route("10.0.0.5", 8082).is_err());
    let mut chained = settings(&["index.crates.io"], &[]);
    chained.upstream = Some("squid.internal:3128".into());
    // Decided by Warden, connected by the upstream: no resolution here.
    let chained = EgressPolicy::with_resolver(chained, table(&[]));
    assert_eq!(
        chained.route("index.crates.io", 443).unwrap(),
        Route::Upstream("squid.internal:3128".into())
    );
    assert!(chained.route("evil.example", 443).is_err());
    assert!(chained.route("1.1.1.1", 443).is_err());
}

/// A plain-HTTP server: answers every request with `respond(request head)`, records heads.
struct Origin {
    address: SocketAddr,
    heads: Arc<Mutex<Vec<String>>>,
}

impl Origin {
    fn start(respond: impl Fn(&str) -> Vec<u8> + Send + Sync + 'static) -> Origin {
        Origin::serve(respond, false)
    }

    /// Like `start`, but keeps every connection open after its answer, as a keep-alive
    /// server does whatever `Connection: close` said.
    fn keeping_alive(respond: impl Fn(&str) -> Vec<u8> + Send + Sync + 'static) -> Origin {
        Origin::serve(respond, true)
    }

    fn serve(
        respond: impl Fn(&str) -> Vec<u8> + Send + Sync + 'static,
        keep_alive: bool,
    ) -> Origin {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let address = listener.local_addr().unwrap();
        let heads = Arc::new(Mutex::new(Vec::new()));
        let seen = Arc::clone(&heads);
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(mut stream) = stream else { return };
                let Ok((head, _)) = read_head(&mut stream) else {
                    continue;
                };
                let head = String::from_utf8_lossy(&head).into_owned();
                let reply = respond(&head);
                seen.lock().unwrap().push(head);
                let _ = stream.write_all(&reply);
                if keep_alive {
                    std::mem::forget(stream);
                }
            }
        });
        Origin { address, heads }
    }

    fn heads(&self) -> Vec<String> {
        self.heads.lock().unwrap().clone()
    }
}

/// A TCP echo server (a stand-in for a TLS registry behind a tunnel).
fn echo() -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let address = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(stream) = stream else { return };
            std::thread::spawn(move || {
                let mut reader = stream.try_clone().unwrap();
                let mut writer = stream;
                let _ = io::copy(&mut reader, &mut writer);
            });
        }
    });
    address
}

/// Sends `request` to the proxy and reads the whole answer.
fn ask(proxy: &EgressProxy, request: &str) -> String {
    let mut stream = TcpStream::connect(proxy.address()).unwrap();
    stream.write_all(request.as_bytes()).unwrap();
    let mut answer = Vec::new();
    let _ = stream.read_to_end(&mut answer);
    String::from_utf8_lossy(&answer).into_owned()
}

fn ok_body(body: &str) -> Vec<u8> {
    format!(
        "HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}

#[test]
fn a_get_reaches_a_listed_registry_without_proxy_headers_and_is_recorded() {
    let origin = Origin::start(|_| ok_body("crate-bytes"));
    let port = origin.address.port();
    let mut proxy = EgressProxy::start(EgressPolicy::with_resolver(
        settings(&[], &[&format!("registry.test:{port}")]),
        table(&[("registry.test", &["127.0.0.1"])]),
    ))
    .unwrap();
    let answer = ask(
        &proxy,
        &format!(
            "GET http://registry.test:{port}/api/v1/crates/x HTTP/1.1\r\nHost: \
             registry.test:{port}\r\nProxy-Authorization: Basic c2VjcmV0\r\nConnection: \
             keep-alive, X-Drop\r\nX-Drop: 1\r\nUser-Agent: cargo\r\n\r\n"
        ),
    );
    assert!(answer.ends_with("crate-bytes"), "{answer}");
    let records = proxy.stop();
    let heads = origin.heads();
    assert_eq!(heads.len(), 1);
    let head = &heads[0];
    assert!(
        head.starts_with("GET /api/v1/crates/x HTTP/1.1\r\n"),
        "{head}"
    );
    assert!(head.contains("User-Agent: cargo"), "{head}");
    assert!(head.contains("Connection: close"), "{head}");
    for dropped in ["Proxy-Authorization", "keep-alive", "X-Drop"] {
        assert!(!head.contains(dropped), "{dropped} forwarded: {head}");
    }
    assert_eq!(records.len(), 1, "{records:?}");
    let record = &records[0];
    assert_eq!(
        (
            record.method.as_str(),
            record.host.as_str(),
            record.port,
            record.allowed
        ),
        ("GET", "registry.test", port, true)
    );
    assert_eq!(record.reason, None);
    assert_eq!(record.bytes_received, answer.len() as u64);
    assert!(record.bytes_sent > 0);
}

#[test]
fn a_tunnel_carries_bytes_both_ways_and_counts_them() {
    let echo = echo();
    let port = echo.port();
    let mut proxy = EgressProxy::start(EgressPolicy::with_resolver(
        settings(&[], &[&format!("static.test:{port}")]),
        table(&[("static.test", &["127.0.0.1"])]),
    ))
    .unwrap();
    let mut stream = TcpStream::connect(proxy.address()).unwrap();
    // The first bytes of the tunnel come with the request, as eager TLS clients send them.
    stream
        .write_all(format!("CONNECT static.test:{port} HTTP/1.1\r\n\r\nhello").as_bytes())
        .unwrap();
    let mut reader = io::BufReader::new(stream.try_clone().unwrap());
    let mut status = String::new();
    reader.read_line(&mut status).unwrap();
    assert!(status.starts_with("HTTP/1.1 200"), "{status}");
    let mut blank = String::new();
    reader.read_line(&mut blank).unwrap();
    let mut echoed = [0u8; 5];
    reader.read_exact(&mut echoed).unwrap();
    assert_eq!(&echoed, b"hello");
    stream.write_all(b"world").unwrap();
    reader.read_exact(&mut echoed).unwrap();
    assert_eq!(&echoed, b"world");
    stream.shutdown(Shutdown::Write).unwrap();
    let mut rest = Vec::new();
    let _ = reader.read_to_end(&mut rest);
    let records = proxy.stop();
    assert_eq!(records.len(), 1, "{records:?}");
    assert_eq!(records[0].method, "CONNECT");
    assert!(records[0].allowed);
    assert_eq!(records[0].bytes_sent, 10);
    assert_eq!(records[0].bytes_received, 10);
}

#[test]
fn refusals_are_answered_recorded_and_never_dialled() {
    let origin = Origin::start(|_| ok_body("should not be reached"));
    let port = origin.address.port();
    let mut proxy = EgressProxy::start(EgressPolicy::with_resolver(
        settings(&["index.crates.io", "rebind.example"], &[]),
        // A listed name that resolves to this machine: the private-after-DNS case.
        table(&[("rebind.example", &["127.0.0.1"])]),
    ))
    .unwrap();
    let cases = [
        (
            format!("GET http://evil.example:{port}/ HTTP/1.1\r\n\r\n"),
            "403",
            "not on the egress allow-list",
        ),
        (
            format!("CONNECT 127.0.0.1:{port} HTTP/1.1\r\n\r\n"),
            "403",
            "is an IP address",
        ),
        (
            "GET http://rebind.example/ HTTP/1.1\r\n\r\n".to_string(),
            "403",
            "no public address",
        ),
        (
            "POST http://index.crates.io/ HTTP/1.1\r\nContent-Length: 0\r\n\r\n".to_string(),
            "405",
            "is not admitted",
        ),
        (
            "GET https://index.crates.io/ HTTP/1.1\r\n\r\n".to_string(),
            "400",
            "cannot read the target",
        ),
        ("hello\r\n\r\n".to_string(), "400", "not an HTTP/1 request"),
        (
            format!(
                "GET http://x/ HTTP/1.1\r\nX: {}\r\n\r\n",
                "a".repeat(MAX_HEAD)
            ),
            "400",
            "longer than",
        ),
    ];
    for (request, status, reason) in &cases {
        let answer = ask(&proxy, request);
        assert!(
            answer.starts_with(&format!("HTTP/1.1 {status}")) && answer.contains(reason),
            "{request:.80}: {answer}"
        );
    }
    assert!(origin.heads().is_empty(), "{:?}", origin.heads());
    let records = proxy.stop();
    assert_eq!(records.len(), cases.len(), "{records:?}");
    assert!(records.iter().all(|r| !r.allowed && r.reason.is_some()));
    assert!(records
        .iter()
        .any(|r| r.host == "evil.example" && r.port == port));
}

#[test]
fn a_redirect_to_a_private_address_is_refused_when_followed() {
    // The listed registry answers with a redirect to an internal address; the client follows
    // it through the proxy, which checks the new host like any other.
    let origin = Origin::start(|_| {
        b"HTTP/1.1 302 Found\r\nLocation: http://169.254.169.254/latest/meta-data/\r\n\
          Content-Length: 0\r\n\r\n"
            .to_vec()
    });
    let port = origin.address.port();
    let mut proxy = EgressProxy::start(EgressPolicy::with_resolver(
        settings(&[], &[&format!("registry.test:{port}")]),
        table(&[("registry.test", &["127.0.0.1"])]),
    ))
    .unwrap();
    let first = ask(
        &proxy,
        &format!("GET http://registry.test:{port}/dl HTTP/1.1\r\n\r\n"),
    );
    assert!(first.starts_with("HTTP/1.1 302"), "{first}");
    let location = first
        .lines()
        .find_map(|line| line.strip_prefix("Location: "))
        .unwrap()
        .trim();
    let second = ask(&proxy, &format!("GET {location} HTTP/1.1\r\n\r\n"));
    assert!(second.starts_with("HTTP/1.1 403"), "{second}");
    // Records are kept as connections end, which need not be the order they were made in.
    let records = proxy.stop();
    assert_eq!(records.len(), 2, "{records:?}");
    assert!(
        records
            .iter()
            .any(|r| r.host == "registry.test" && r.allowed),
        "{records:?}"
    );
    assert!(
        records
            .iter()
            .any(|r| r.host == "169.254.169.254" && !r.allowed),
        "{records:?}"
    );
}

#[test]
fn the_byte_limit_cuts_a_download_and_says_so() {
    let origin = Origin::start(|_| ok_body(&"x".repeat(200_000)));
    let port = origin.address.port();
    let mut limited = settings(&[], &[&format!("registry.test:{port}")]);
    limited.max_bytes = 10_000;
    let mut proxy = EgressProxy::start(EgressPolicy::with_resolver(
        limited,
        table(&[("registry.test", &["127.0.0.1"])]),
    ))
    .unwrap();
    let answer = ask(
        &proxy,
        &format!("GET http://registry.test:{port}/big HTTP/1.1\r\n\r\n"),
    );
    assert!(answer.len() < 20_000, "{} bytes came through", answer.len());
    let records = proxy.stop();
    let reason = records[0].reason.clone().unwrap_or_default();
    assert!(reason.contains("byte limit"), "{records:?}");
}

#[test]
fn an_upstream_proxy_gets_connect_and_absolute_requests_for_listed_hosts_only() {
    // The operator's proxy: answers CONNECT with 200 and then echoes; a GET with a body.
    let upstream = Origin::start(|head| {
        if head.starts_with("CONNECT ") {
            b"HTTP/1.1 403 Forbidden\r\nContent-Length: 0\r\n\r\n".to_vec()
        } else {
            ok_body("via-upstream")
        }
    });
    let mut chained = settings(&["deps.example", "index.crates.io"], &[]);
    chained.upstream = Some(upstream.address.to_string());
    let mut proxy = EgressProxy::start(EgressPolicy::with_resolver(chained, table(&[]))).unwrap();
    let answer = ask(
        &proxy,
        "GET http://deps.example/dep HTTP/1.0\r\nProxy-Authorization: x\r\n\r\n",
    );
    assert!(answer.ends_with("via-upstream"), "{answer}");
    // The upstream refuses this tunnel: the client hears it as a 502 naming the status.
    let refused = ask(&proxy, "CONNECT index.crates.io:443 HTTP/1.1\r\n\r\n");
    assert!(
        refused.starts_with("HTTP/1.1 502") && refused.contains("403"),
        "{refused}"
    );
    let not_listed = ask(&proxy, "CONNECT evil.example:443 HTTP/1.1\r\n\r\n");
    assert!(not_listed.starts_with("HTTP/1.1 403"), "{not_listed}");
    let heads = upstream.heads();
    assert_eq!(heads.len(), 2, "{heads:?}");
    assert!(
        heads[0].starts_with("GET http://deps.example/dep HTTP/1.0\r\n"),
        "{}",
        heads[0]
    );
    assert!(!heads[0].contains("Proxy-Authorization"), "{}", heads[0]);
    assert!(
        heads[1].starts_with("CONNECT index.crates.io:443 HTTP/1.1\r\n"),
        "{}",
        heads[1]
    );
    let records = proxy.stop();
    assert_eq!(records.len(), 3);
}

#[test]
fn stopping_closes_open_connections_and_keeps_their_records() {
    let echo = echo();
    let port = echo.port();
    let mut proxy = EgressProxy::start(EgressPolicy::with_resolver(
        settings(&[], &[&format!("static.test:{port}")]),
        table(&[("static.test", &["127.0.0.1"])]),
    ))
    .unwrap();
    let mut stream = TcpStream::connect(proxy.address()).unwrap();
    stream
        .write_all(format!("CONNECT static.test:{port} HTTP/1.1\r\n\r\n").as_bytes())
        .unwrap();
    let mut status = [0u8; 12];
    stream.read_exact(&mut status).unwrap();
    let records = proxy.stop();
    assert_eq!(records.len(), 1, "{records:?}");
    let mut rest = Vec::new();
    // The client sees its connection end.
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    match stream.read_to_end(&mut rest) {
        Ok(_) => {}
        Err(error) => assert!(
            !matches!(
                error.kind(),
                io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
            ),
            "the tunnel stayed open: {error}"
        ),
    }
    // Nothing listens any more.
    assert!(TcpStream::connect(proxy.address()).is_err());
}

#[test]
fn a_response_ends_by_its_framing_even_when_the_server_keeps_the_connection_open() {
    let chunked = "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nConnection: \
                   keep-alive\r\n\r\n5\r\nhello\r\n6;ext=1\r\n world\r\n0\r\nX-Trailer: \
                   1\r\n\r\n";
    let origin = Origin::keeping_alive(move |head| {
        if head.starts_with("GET /chunked") {
            chunked.as_bytes().to_vec()
        } else if head.starts_with("GET /empty") {
            b"HTTP/1.1 304 Not Modified\r\nETag: x\r\n\r\n".to_vec()
        } else {
            ok_body("sized")
        }
    });
    let port = origin.address.port();
    let mut proxy = EgressProxy::start(EgressPolicy::with_resolver(
        settings(&[], &[&format!("registry.test:{port}")]),
        table(&[("registry.test", &["127.0.0.1"])]),
    ))
    .unwrap();
    // `ask` reads to the end of the connection: it returns only because the proxy closed it
    // once the response was complete (an idle wait would take a minute).
    let started = Instant::now();
    let sized = ask(
        &proxy,
        &format!("GET http://registry.test:{port}/sized HTTP/1.1\r\n\r\n"),
    );
    assert!(sized.ends_with("\r\n\r\nsized"), "{sized}");
    assert!(sized.contains("Connection: close\r\n"), "{sized}");
    let whole = ask(
        &proxy,
        &format!("GET http://registry.test:{port}/chunked HTTP/1.1\r\n\r\n"),
    );
    assert!(
        whole.ends_with("5\r\nhello\r\n6;ext=1\r\n world\r\n0\r\nX-Trailer: 1\r\n\r\n"),
        "{whole}"
    );
    assert!(!whole.contains("keep-alive"), "{whole}");
    let empty = ask(
        &proxy,
        &format!("GET http://registry.test:{port}/empty HTTP/1.1\r\n\r\n"),
    );
    assert!(empty.starts_with("HTTP/1.1 304"), "{empty}");
    let head = ask(
        &proxy,
        &format!("HEAD http://registry.test:{port}/sized HTTP/1.1\r\n\r\n"),
    );
    assert!(head.ends_with("Connection: close\r\n\r\n"), "{head}");
    assert!(
        started.elapsed() < IDLE_TIMEOUT,
        "a response waited for idleness"
    );
    let records = proxy.stop();
    assert_eq!(records.len(), 4);
    assert!(
        records.iter().all(|r| r.allowed && r.reason.is_none()),
        "{records:?}"
    );
}
