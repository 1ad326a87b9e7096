//! The callback signature: `Warden-Signature: sha256=<hex HMAC-SHA256(secret, timestamp "." body)>`
//! with the Unix-seconds timestamp in `Warden-Timestamp`, so a receiver can check both the sender
//! and the freshness of a request. HMAC (RFC 2104) is RustCrypto's `hmac` over `sha2`; RFC 4231's
//! vectors pin it down.

use hmac::{Hmac, Mac};
use sha2::Sha256;

/// HMAC-SHA256 of `message` under `key`.
pub fn hmac_sha256(key: &[u8], message: &[u8]) -> [u8; 32] {
    // HMAC takes a key of any length (one longer than the block is hashed first): the
    // `InvalidLength` error exists for MACs with fixed-size keys and is never returned here.
    let Ok(mut mac) = Hmac::<Sha256>::new_from_slice(key) else {
        unreachable!("HMAC-SHA256 accepts keys of any length")
    };
    mac.update(message);
    mac.finalize().into_bytes().into()
}

/// The `Warden-Signature` value for a request sent at `timestamp` (Unix seconds) with `body`.
pub fn signature(secret: &[u8], timestamp: i64, body: &[u8]) -> String {
    let mut message = Vec::with_capacity(body.len() + 21);
    message.extend_from_slice(timestamp.to_string().as_bytes());
    message.push(b'.');
    message.extend_from_slice(body);
    format!("sha256={}", hex::encode(hmac_sha256(secret, &message)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(key: &[u8], data: &[u8], expected: &str) {
        assert_eq!(hex::encode(hmac_sha256(key, data)), expected);
    }

    #[test]
    fn rfc_4231_vectors() {
        // Test case 4: a key of 25 bytes, 50 bytes of data.
        check(
            &(1..=25).collect::<Vec<u8>>(),
            &[0xcd; 50],
            "82558a389a443c0ea4cc819899f2083a85f0faa3e578f8077a2e3ff46729665b",
        );
        // Test case 1.
        check(
            &[0x0b; 20],
            b"Hi There",
            "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7",
        );
        // Test case 2: a key shorter than the output.
        check(
            b"Jefe",
            b"what do ya want for nothing?",
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843",
        );
        // Test case 6: a key longer than the block is hashed first.
        check(
            &[0xaa; 131],
            b"Test Using Larger Than Block-Size Key - Hash Key First",
            "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54",
        );
        // Test case 7: a long key and a message longer than the block.
        check(
            &[0xaa; 131],
            b"This is a test using a larger than block-size key and a larger than block-size data. The key needs to be hashed before being used by the HMAC algorithm.",
            "9b09ffa71b942fcb27635fbcd5b0e944bfdc63644f0713938a7f51535c3a35e2",
        );
        // An empty key (padded with zeros to the block), as `openssl dgst -hmac ""` gives.
        check(
            b"",
            b"",
            "b613679a0814d9ec772f95d778c35fc5ff1697c493715653c6c712144292c5ad",
        );
    }

    #[test]
    fn the_signature_covers_timestamp_and_body() {
        let secret = b"0123456789abcdef0123456789abcdef";
        let signed = signature(secret, 1_700_000_000, b"{}");
        assert_eq!(
            signed,
            format!(
                "sha256={}",
                hex::encode(hmac_sha256(secret, b"1700000000.{}"))
            )
        );
        assert_ne!(signed, signature(secret, 1_700_000_001, b"{}"));
        assert_ne!(signed, signature(secret, 1_700_000_000, b"{ }"));
    }
}
