//! Egress relays across backends: `gvisor` refuses a view that asks for one (never giving it
//! other network), and a proxy address that is not `host:port` is refused by every backend.
//! The `linux` relay itself is tested in `linux_egress.rs`.

use super::support::Fixture;
use warden_sandbox::{Backend, Layer, SandboxError, ViewSpec};

#[test]
fn gvisor_refuses_a_relay_view() {
    let Some(sandbox) = super::support::sandbox(Backend::Gvisor) else {
        return;
    };
    assert!(!sandbox.relays_egress());
    let fixture = Fixture::new();
    let spec = ViewSpec {
        egress_proxy: Some("127.0.0.1:3128".into()),
        ..fixture.view(false)
    };
    match sandbox.open(&spec) {
        Err(SandboxError::Unavailable {
            backend,
            layer,
            reason,
        }) => {
            assert_eq!(backend, Backend::Gvisor);
            assert_eq!(layer, Layer::NetNamespace);
            assert!(reason.contains("cannot relay"), "{reason}");
        }
        Err(other) => panic!("unexpected error: {other}"),
        Ok(_) => panic!("gvisor opened a view with an egress relay"),
    }
}

#[test]
fn a_bad_proxy_address_is_refused() {
    let Some(sandbox) = super::support::sandbox(Backend::Local) else {
        return;
    };
    let fixture = Fixture::new();
    for bad in [
        "proxy",
        "proxy:0",
        ":3128",
        "proxy:http",
        "a b:1",
        "[::1:3128",
    ] {
        let spec = ViewSpec {
            egress_proxy: Some(bad.to_string()),
            ..fixture.view(false)
        };
        match sandbox.open(&spec) {
            Err(SandboxError::InvalidRequest(message)) => {
                assert!(message.contains("host:port"), "{bad}: {message}")
            }
            Err(other) => panic!("{bad}: {other}"),
            Ok(_) => panic!("{bad} was accepted"),
        }
    }
}
