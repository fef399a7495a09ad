//! The browser console (`/ui`) and the API docs page (`/docs`): static
//! files from the repository's `ui/` directory, embedded in the binary (no
//! CDN, nothing fetched at build or run time: they work air-gapped).
//!
//! The pages are plain ES modules run under a strict Content-Security-Policy
//! (scripts and styles from this origin only, no inline script or style, no
//! eval, requests to this origin only). The console has no route of its
//! own beyond these files: it calls `/whoami`, `/query`, `/statements`,
//! `/queries` and `/catalog` (`/catalog/functions` for autocompletion) with
//! the user's token in the `Authorization` header, exactly as curl would, so
//! it can do nothing a token could not do without it.

use axum::extract::Path;
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::get;
use axum::Router;

use crate::api::error::ApiError;
use crate::api::AppState;

/// What every page and asset answer carries. `connect-src 'self'`: the
/// page can talk to its gateway and nothing else; `img-src` allows the
/// `blob:` URLs downloads are saved through and `data:` for the chart's PNG.
pub const CSP: &str = "default-src 'self'; script-src 'self'; style-src 'self'; \
img-src 'self' data: blob:; connect-src 'self'; font-src 'self'; object-src 'none'; \
base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

/// One embedded file.
struct Asset {
    name: &'static str,
    content_type: &'static str,
    body: &'static str,
}

const JS: &str = "text/javascript; charset=utf-8";
const CSS: &str = "text/css; charset=utf-8";
const SVG: &str = "image/svg+xml";

/// The pages' icon (linked by both, so a browser asks for no `/favicon.ico`).
const FAVICON: Asset = Asset {
    name: "favicon.svg",
    content_type: SVG,
    body: include_str!("../../ui/favicon.svg"),
};

/// The console's files, served under `/ui/`.
const CONSOLE: &[Asset] = &[
    Asset {
        name: "console.js",
        content_type: JS,
        body: include_str!("../../ui/console.js"),
    },
    Asset {
        name: "api.js",
        content_type: JS,
        body: include_str!("../../ui/api.js"),
    },
    Asset {
        name: "editor.js",
        content_type: JS,
        body: include_str!("../../ui/editor.js"),
    },
    Asset {
        name: "complete.js",
        content_type: JS,
        body: include_str!("../../ui/complete.js"),
    },
    Asset {
        name: "sha256.js",
        content_type: JS,
        body: include_str!("../../ui/sha256.js"),
    },
    Asset {
        name: "grid.js",
        content_type: JS,
        body: include_str!("../../ui/grid.js"),
    },
    Asset {
        name: "chart.js",
        content_type: JS,
        body: include_str!("../../ui/chart.js"),
    },
    Asset {
        name: "numbers.js",
        content_type: JS,
        body: include_str!("../../ui/numbers.js"),
    },
    Asset {
        name: "profile.js",
        content_type: JS,
        body: include_str!("../../ui/profile.js"),
    },
    Asset {
        name: "titles.js",
        content_type: JS,
        body: include_str!("../../ui/titles.js"),
    },
    Asset {
        name: "workspace.js",
        content_type: JS,
        body: include_str!("../../ui/workspace.js"),
    },
    FAVICON,
    Asset {
        name: "console.css",
        content_type: CSS,
        body: include_str!("../../ui/console.css"),
    },
];

/// The docs page's files, served under `/docs/` (the docs stay when the
/// console is turned off).
const DOCS: &[Asset] = &[
    Asset {
        name: "docs.js",
        content_type: JS,
        body: include_str!("../../ui/docs.js"),
    },
    Asset {
        name: "docs.css",
        content_type: CSS,
        body: include_str!("../../ui/docs.css"),
    },
    FAVICON,
];

const CONSOLE_HTML: &str = include_str!("../../ui/index.html");
const DOCS_HTML: &str = include_str!("../../ui/docs.html");

/// `body` with the headers every UI answer carries.
fn page(content_type: &'static str, body: impl Into<axum::body::Body>) -> Response {
    let mut r = (StatusCode::OK, body.into()).into_response();
    let h = r.headers_mut();
    h.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(CSP),
    );
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    h.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    h.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    // The files change with the binary; a reload must see a new release.
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    r
}

fn asset(table: &'static [Asset], name: &str) -> Response {
    match table.iter().find(|a| a.name == name) {
        Some(a) => page(a.content_type, a.body),
        None => ApiError::NotFound("no such file".into()).into_response(),
    }
}

/// The console's routes (`/`, `/ui`, `/ui/{file}`); none when `enabled`
/// is false, so they answer 404 like any unknown path.
pub fn console_router(enabled: bool) -> Router<AppState> {
    if !enabled {
        return Router::new();
    }
    Router::new()
        .route("/", get(|| async { Redirect::to("/ui") }))
        .route("/ui", get(console_page))
        .route(
            "/ui/{file}",
            get(|Path(file): Path<String>| async move { asset(CONSOLE, &file) }),
        )
}

/// The docs page: the OpenAPI document rendered in the browser by
/// `ui/docs.js` from a copy embedded in the page (a JSON data block, which
/// the CSP lets through because it never runs).
pub fn docs_router() -> Router<AppState> {
    Router::new().route("/docs", get(docs_page)).route(
        "/docs/{file}",
        get(|Path(file): Path<String>| async move { asset(DOCS, &file) }),
    )
}

/// The browser console.
///
/// One HTML page (its scripts and styles under `/ui/`, all embedded in the
/// binary) that runs SQL through this API with the user's token: async
/// statements, progress, cancel, result tabs with a virtual table, a cell
/// viewer, downloads, a chart, a column profile, the catalog,
/// autocompletion, the caller's identity (`/whoami`), a history and a
/// workspace (the editor and the tabs) kept in the browser per identity.
/// `/` redirects here. Off (404) with `DUCKGATE_UI=false`.
#[utoipa::path(get, path = "/ui", tag = "console",
    responses(
        (status = 200, description = "The console page", body = String, content_type = "text/html"),
        (status = 404, description = "The console is turned off (DUCKGATE_UI=false)", body = crate::api::error::Problem, content_type = "application/problem+json")
    ))]
pub async fn console_page() -> Response {
    page("text/html; charset=utf-8", CONSOLE_HTML)
}

/// This API's documentation, rendered in the browser from the OpenAPI
/// document embedded in the page (works offline).
#[utoipa::path(get, path = "/docs", tag = "console",
    responses((status = 200, description = "The docs page", body = String, content_type = "text/html")))]
pub async fn docs_page() -> Response {
    // `</` cannot end the data block early: JSON allows `<\/` for it.
    let spec = crate::api::docs::spec_json().replace("</", "<\\/");
    page(
        "text/html; charset=utf-8",
        DOCS_HTML.replace("{{OPENAPI_JSON}}", &spec),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_module_import_is_served() {
        // A module imported by a page but missing from the table would
        // load as a 404 only in a browser: catch it here.
        for a in CONSOLE.iter().chain(DOCS) {
            for line in a.body.lines() {
                let Some(rest) = line.trim().strip_prefix("import ") else {
                    continue;
                };
                let Some(from) = rest.split("from").nth(1) else {
                    continue;
                };
                let file = from
                    .trim()
                    .trim_matches(|c| c == '\'' || c == '"' || c == ';');
                let file = file.trim_start_matches("./");
                assert!(
                    CONSOLE.iter().chain(DOCS).any(|b| b.name == file),
                    "{} imports {file}, which is not embedded",
                    a.name
                );
            }
        }
    }

    #[test]
    fn pages_hold_no_inline_script_or_style() {
        for html in [CONSOLE_HTML, DOCS_HTML] {
            assert!(!html.contains("style="), "inline style attribute");
            assert!(!html.contains("<style"), "inline style element");
            for part in html.split("<script").skip(1) {
                let head = part.split('>').next().unwrap_or("");
                assert!(
                    head.contains("src=") || head.contains("application/json"),
                    "inline script: <script{head}>"
                );
            }
        }
    }
}
