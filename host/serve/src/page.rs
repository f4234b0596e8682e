//! `GET /`: the console, for people. An overview of the pipelines (`#/`) and a page per
//! pipeline (`#/pipeline/<name>`): its graph with per-edge records/s, watermark and lag,
//! throughput chart, checkpoint and exception history, UDF versions with rollback and
//! stop (authenticated with the API token, kept in the browser's sessionStorage), tasks
//! in a group, and the pipeline file. Everything it shows comes from `/api/pipelines`,
//! read every two seconds. One self-contained document: no build step, no outside
//! assets; its parts are the files under `host/serve/console/`.

use std::sync::LazyLock;

/// The document's frame, with the places its styles and script go.
const HTML: &str = include_str!("../console/index.html");
/// Its styles.
const CSS: &str = include_str!("../console/console.css");
/// Its script.
const JS: &str = include_str!("../console/console.js");

/// The page: the frame with its styles and script inline.
pub static PAGE: LazyLock<String> =
    LazyLock::new(|| HTML.replacen("/*CSS*/", CSS, 1).replacen("/*JS*/", JS, 1));
