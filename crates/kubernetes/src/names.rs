//! Names and labels: what Kubernetes accepts (DNS labels, label values) and what Warden puts on
//! the objects it creates.

/// Every object Warden creates carries `app.kubernetes.io/managed-by: warden`.
pub(crate) const MANAGED_BY: (&str, &str) = ("app.kubernetes.io/managed-by", "warden");
/// The Warden process (`KubernetesConfig::owner`) that created a claim.
pub(crate) const OWNER_LABEL: &str = "warden.dev/owner";
/// The task a claim's sandbox serves (`kubectl get sandboxclaims -l warden.dev/task=ID`).
pub(crate) const TASK_LABEL: &str = "warden.dev/task";

/// A DNS-1123 label: 1–63 lowercase alphanumerics or '-', alphanumeric at both ends.
pub(crate) fn is_dns_label(name: &str) -> bool {
    let bytes = name.as_bytes();
    !bytes.is_empty()
        && bytes.len() <= 63
        && bytes
            .iter()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || *b == b'-')
        && bytes[0] != b'-'
        && bytes[bytes.len() - 1] != b'-'
}

/// A label value: empty, or 1–63 alphanumerics, '-', '_', '.', alphanumeric at both ends.
pub(crate) fn is_label_value(value: &str) -> bool {
    let bytes = value.as_bytes();
    if bytes.is_empty() {
        return true;
    }
    bytes.len() <= 63
        && bytes
            .iter()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
        && bytes[0].is_ascii_alphanumeric()
        && bytes[bytes.len() - 1].is_ascii_alphanumeric()
}

/// A claim's name: `warden-` and 16 random lowercase base-32 characters (23 characters, well
/// under the 63 a claim, its sandbox and the pod's labels allow).
pub(crate) fn claim_name(random: [u8; 10]) -> String {
    const ALPHABET: &[u8; 32] = b"abcdefghijklmnopqrstuvwxyz234567";
    let mut bits: u128 = 0;
    for byte in random {
        bits = (bits << 8) | u128::from(byte);
    }
    let mut name = String::from("warden-");
    for index in (0..16).rev() {
        name.push(char::from(ALPHABET[((bits >> (index * 5)) & 31) as usize]));
    }
    name
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dns_labels() {
        for (name, ok) in [
            ("warden", true),
            ("a", true),
            ("warden-sandboxes", true),
            ("0abc", true),
            ("", false),
            ("-a", false),
            ("a-", false),
            ("Warden", false),
            ("a.b", false),
            (&"a".repeat(63), true),
            (&"a".repeat(64), false),
        ] {
            assert_eq!(is_dns_label(name), ok, "{name:?}");
        }
    }

    #[test]
    fn label_values() {
        for (value, ok) in [
            ("", true),
            ("tsk_01ABC", true),
            ("worker-1.a", true),
            ("_a", false),
            ("a b", false),
            (&"x".repeat(64), false),
        ] {
            assert_eq!(is_label_value(value), ok, "{value:?}");
        }
    }

    #[test]
    fn claim_names_are_short_dns_labels() {
        let name = claim_name([0xff; 10]);
        assert_eq!(name, "warden-7777777777777777");
        assert!(is_dns_label(&name));
        assert!(is_dns_label(&claim_name([0; 10])));
        assert_ne!(claim_name([1; 10]), claim_name([2; 10]));
    }
}
