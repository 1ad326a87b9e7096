//! The console's static files, embedded in the binary. Each is served under a name holding
//! a hash of its content (`/assets/app.3f9c….css`) with `Cache-Control: immutable`, so a
//! browser keeps it until the binary changes it. The manifest and the service worker have
//! fixed names (browsers look them up by name) and are revalidated every time.

use std::sync::LazyLock;

use axum::extract::Path;
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use sha2::{Digest, Sha256};

/// One embedded file under its content-hashed name.
pub(super) struct Asset {
    /// `/assets/<stem>.<hash>.<extension>`.
    pub path: String,
    pub content_type: &'static str,
    pub body: &'static str,
    etag: String,
}

impl Asset {
    fn new(stem: &str, extension: &str, content_type: &'static str, body: &'static str) -> Asset {
        let hash = hex::encode(&Sha256::digest(body.as_bytes())[..8]);
        Asset {
            path: format!("/assets/{stem}.{hash}.{extension}"),
            content_type,
            body,
            etag: format!("\"{hash}\""),
        }
    }
}

pub(super) struct Assets {
    pub css: Asset,
    pub js: Asset,
    pub icon: Asset,
    /// The manifest with the icon's hashed name filled in.
    manifest: String,
    /// The service worker with the shell's hashed names filled in.
    service_worker: String,
}

pub(super) static ASSETS: LazyLock<Assets> = LazyLock::new(|| {
    let css = Asset::new(
        "app",
        "css",
        "text/css; charset=utf-8",
        include_str!("assets/app.css"),
    );
    let js = Asset::new(
        "app",
        "js",
        "text/javascript; charset=utf-8",
        include_str!("assets/app.js"),
    );
    let icon = Asset::new(
        "icon",
        "svg",
        "image/svg+xml",
        include_str!("assets/icon.svg"),
    );
    let manifest =
        include_str!("assets/manifest.webmanifest").replace("/assets/icon.svg", &icon.path);
    let shell = [&css.path, &js.path, &icon.path];
    let version = hex::encode(&Sha256::digest(format!("{shell:?}").as_bytes())[..8]);
    let service_worker = include_str!("assets/sw.js")
        .replace("%VERSION%", &version)
        .replace(
            "%ASSETS%",
            &serde_json::to_string(&shell).unwrap_or_else(|_| "[]".into()),
        );
    Assets {
        css,
        js,
        icon,
        manifest,
        service_worker,
    }
});

/// `GET /assets/{name}`: an embedded file by its hashed name; anything else is 404.
pub(super) async fn asset(Path(name): Path<String>, headers: HeaderMap) -> Response {
    let assets = &*ASSETS;
    let path = format!("/assets/{name}");
    let Some(asset) = [&assets.css, &assets.js, &assets.icon]
        .into_iter()
        .find(|a| a.path == path)
    else {
        return (StatusCode::NOT_FOUND, "no such asset").into_response();
    };
    let etag = HeaderValue::from_str(&asset.etag).unwrap_or(HeaderValue::from_static("\"\""));
    let cache = HeaderValue::from_static("public, max-age=31536000, immutable");
    if headers
        .get(header::IF_NONE_MATCH)
        .is_some_and(|v| v.as_bytes() == asset.etag.as_bytes())
    {
        return (
            StatusCode::NOT_MODIFIED,
            [(header::ETAG, etag), (header::CACHE_CONTROL, cache)],
        )
            .into_response();
    }
    (
        [
            (
                header::CONTENT_TYPE,
                HeaderValue::from_static(asset.content_type),
            ),
            (header::CACHE_CONTROL, cache),
            (header::ETAG, etag),
        ],
        asset.body,
    )
        .into_response()
}

fn revalidated(content_type: &'static str, body: &'static str) -> Response {
    (
        [
            (header::CONTENT_TYPE, HeaderValue::from_static(content_type)),
            (header::CACHE_CONTROL, HeaderValue::from_static("no-cache")),
        ],
        body,
    )
        .into_response()
}

/// `GET /manifest.webmanifest`.
pub(super) async fn manifest() -> Response {
    revalidated("application/manifest+json", ASSETS.manifest.as_str())
}

/// `GET /sw.js`: at the root, so its scope is the whole console.
pub(super) async fn service_worker() -> Response {
    revalidated(
        "text/javascript; charset=utf-8",
        ASSETS.service_worker.as_str(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn asset_names_carry_their_content_hash_and_the_shell_lists_them() {
        let assets = &*ASSETS;
        for asset in [&assets.css, &assets.js, &assets.icon] {
            let hash = hex::encode(&Sha256::digest(asset.body.as_bytes())[..8]);
            assert!(asset.path.contains(&hash), "{}", asset.path);
            assert!(assets.service_worker.contains(&asset.path));
        }
        assert!(!assets.service_worker.contains('%'));
        assert!(assets.manifest.contains(&assets.icon.path));
        let manifest: serde_json::Value = serde_json::from_str(&assets.manifest).unwrap();
        assert_eq!(manifest["start_url"], "/");
    }
}
