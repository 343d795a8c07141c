//! `ordo console`: the operator console in the browser, on the same status
//! and admin code as the CLI (`ordo status`, `inspect`, `retry`, `skip`,
//! `dlq`): one owner for both.
//!
//! The page (embedded: no CDN, works offline) polls the JSON API under
//! `/api/`. Reads are open to whoever reaches the address, which is
//! localhost unless `--listen` says otherwise. Actions (`POST
//! /api/<action>`) are refused unless the console was started with
//! `--allow-actions`; they then need the token of `ORDO_CONSOLE_TOKEN` in
//! an `Authorization: Bearer` header, compared in constant time, and a
//! same-origin request: a header no cross-site form or image can send, a
//! JSON body (a cross-site script would need a CORS preflight, which this
//! server never grants), and the `Origin` and `Sec-Fetch-Site` headers
//! checked when the browser sends them. A retry, skip or dead-letter
//! names the head the operator saw, and applies only if the key is still
//! halted on it (as `--expect-head` does). Every action, and every refused
//! one, is logged with its stable event name.

mod assets;

use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use ordo_core::contract::log_events;
use serde::{Deserialize, Serialize};
use subtle::ConstantTimeEq as _;
use tokio::sync::Mutex;

use crate::cli::{Action, ConsoleArgs};
use crate::commands::{act, dlq, inspect, status};
use crate::context::Context;
use crate::exit::{Failure, Verdict};
use crate::view::{HaltView, lane_name};

/// The environment variable holding the actions' token.
pub(crate) const TOKEN_VARIABLE: &str = "ORDO_CONSOLE_TOKEN";
/// A token shorter than this is refused: it could be guessed.
const MIN_TOKEN_LEN: usize = 16;
/// How long a status snapshot is served again before it is read anew: many
/// open pages cost Redis one read per second.
const SNAPSHOT_TTL: Duration = Duration::from_secs(1);
/// The most rows a list answers with at once.
const MAX_PER_PAGE: usize = 500;
/// Dead letters read per category at most, for a search and its pages.
const DEAD_LETTERS_READ: usize = 5_000;

/// The console's state, shared by its handlers.
struct Console {
    ctx: Context,
    /// The actions' token, when actions are allowed.
    token: Option<String>,
    warn_partitions: u64,
    /// The last snapshot and when it was read.
    snapshot: Mutex<Option<(Instant, Arc<serde_json::Value>)>>,
}

type Shared = Arc<Console>;

/// The actions' token when `--allow-actions` is given (from
/// `ORDO_CONSOLE_TOKEN`), or why the console cannot start.
pub(crate) fn token(args: &ConsoleArgs) -> Result<Option<String>, Failure> {
    if args.allow_actions {
        token_from(std::env::var(TOKEN_VARIABLE).ok()).map(Some)
    } else {
        Ok(None)
    }
}

/// Serves the console on `args.listen` until Ctrl-C or SIGTERM; actions
/// with `token` only (none: read-only).
pub(crate) async fn run(ctx: Context, args: &ConsoleArgs, token: Option<String>) -> Result<Verdict, Failure> {
    init_logging();
    let listener = tokio::net::TcpListener::bind(args.listen)
        .await
        .map_err(|error| Failure::Usage(format!("cannot listen on {}: {error}", args.listen)))?;
    let address = listener.local_addr().map_err(anyhow::Error::from)?;
    let mode = if token.is_some() {
        "actions allowed (token required)"
    } else {
        "read-only"
    };
    println!(
        "ordo console on http://{address}/ ({mode}), Redis {}; Ctrl-C to stop",
        ctx.settings.redis_url
    );
    tracing::info!(
        event = log_events::CONSOLE_STARTED,
        %address,
        actions = token.is_some(),
        "the console serves"
    );
    let console = Arc::new(Console {
        warn_partitions: args.warn_partitions.unwrap_or(ctx.settings.warn_partitions),
        ctx,
        token,
        snapshot: Mutex::new(None),
    });
    let served = axum::serve(listener, router(Arc::clone(&console)))
        .with_graceful_shutdown(stopped())
        .await;
    console.ctx.close().await;
    served.map_err(|error| Failure::Error(anyhow::Error::from(error).context("the console stopped")))?;
    Ok(Verdict::Ok)
}

/// The token of `ORDO_CONSOLE_TOKEN`, or why `--allow-actions` cannot start.
fn token_from(value: Option<String>) -> Result<String, Failure> {
    match value {
        None => Err(Failure::Usage(format!(
            "--allow-actions needs a token in {TOKEN_VARIABLE} (at least {MIN_TOKEN_LEN} characters, e.g. \
             `export {TOKEN_VARIABLE}=$(openssl rand -hex 24)`); every action from the page must present it"
        ))),
        Some(token) if token.trim().chars().count() < MIN_TOKEN_LEN => Err(Failure::Usage(format!(
            "{TOKEN_VARIABLE} is too short: at least {MIN_TOKEN_LEN} characters (it guards the actions of \
             --allow-actions)"
        ))),
        Some(token) => Ok(token.trim().to_owned()),
    }
}

/// Log lines on standard error (`RUST_LOG` filters them; info by default),
/// colored on a terminal only.
fn init_logging() {
    use std::io::IsTerminal as _;
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::stderr().is_terminal())
        .with_writer(std::io::stderr)
        .try_init();
}

/// Resolves on Ctrl-C or SIGTERM.
async fn stopped() {
    let terminate = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut signal) => {
                signal.recv().await;
            }
            Err(_) => std::future::pending().await,
        }
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        () = terminate => {}
    }
}

fn router(console: Shared) -> Router {
    Router::new()
        .route("/", get(assets::index))
        .route("/console.js", get(assets::script))
        .route("/console.css", get(assets::style))
        .route("/api/status", get(status_of))
        .route("/api/halted", get(halted))
        .route("/api/partitions", get(partitions))
        .route("/api/inspect", get(inspect_key))
        .route("/api/dlq", get(dead_letters))
        .route("/api/{action}", post(act_on))
        .fallback(|| async { ApiError::new(StatusCode::NOT_FOUND, "no such page".to_owned()) })
        .layer(axum::middleware::map_response(secure_headers))
        .with_state(console)
}

/// Headers of every answer: nothing may frame the page, run a script from
/// elsewhere or guess a type.
async fn secure_headers(mut response: Response) -> Response {
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(
            "default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'; \
             connect-src 'self'; frame-ancestors 'none'; form-action 'none'; base-uri 'none'",
        ),
    );
    headers.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    headers.insert(header::REFERRER_POLICY, HeaderValue::from_static("no-referrer"));
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    response
}

/// An error answer: `{"error": "..."}` with its status.
#[derive(Debug)]
struct ApiError {
    status: StatusCode,
    message: String,
}

impl ApiError {
    fn new(status: StatusCode, message: String) -> Self {
        Self { status, message }
    }
}

impl From<Failure> for ApiError {
    fn from(failure: Failure) -> Self {
        match failure {
            Failure::Usage(message) => Self::new(StatusCode::BAD_REQUEST, message),
            Failure::Refused(message) => Self::new(StatusCode::CONFLICT, message),
            Failure::Error(error) => Self::new(StatusCode::INTERNAL_SERVER_ERROR, format!("{error:#}")),
        }
    }
}

impl From<ordo_redis::Error> for ApiError {
    fn from(error: ordo_redis::Error) -> Self {
        Failure::from(error).into()
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        #[derive(Serialize)]
        struct Body {
            error: String,
        }
        (self.status, Json(Body { error: self.message })).into_response()
    }
}

type ApiResult<T> = Result<Json<T>, ApiError>;

/// `GET /api/status`: `ordo status --json`, with what the page needs to know
/// about the console itself.
async fn status_of(State(console): State<Shared>) -> Result<Response, ApiError> {
    let mut cached = console.snapshot.lock().await;
    let snapshot = match &*cached {
        Some((read, snapshot)) if read.elapsed() < SNAPSHOT_TTL => Arc::clone(snapshot),
        _ => {
            let snapshot = status::snapshot(&console.ctx, &[], console.warn_partitions).await?;
            let snapshot = Arc::new(serde_json::to_value(&snapshot).map_err(|e| Failure::Error(e.into()))?);
            *cached = Some((Instant::now(), Arc::clone(&snapshot)));
            snapshot
        }
    };
    drop(cached);
    Ok(Json(serde_json::json!({
        "redis": console.ctx.settings.redis_url.to_string(),
        "actions": console.token.is_some(),
        "status": snapshot,
    }))
    .into_response())
}

/// A page of a list: which one, how long, and what to look for.
#[derive(Debug, Deserialize)]
struct Paging {
    #[serde(default)]
    q: String,
    #[serde(default)]
    page: usize,
    per_page: Option<usize>,
    category: Option<String>,
}

impl Paging {
    fn per_page(&self) -> usize {
        self.per_page.unwrap_or(50).clamp(1, MAX_PER_PAGE)
    }

    /// Whether `text` matches the search (case-insensitive; empty matches all).
    fn matches(&self, fields: &[&str]) -> bool {
        let wanted = self.q.trim().to_lowercase();
        wanted.is_empty() || fields.iter().any(|field| field.to_lowercase().contains(&wanted))
    }

    /// Page `self.page` of `items`, with the total.
    fn cut<T>(&self, items: Vec<T>) -> Page<T> {
        let per_page = self.per_page();
        let total = items.len();
        let items = items
            .into_iter()
            .skip(self.page.saturating_mul(per_page))
            .take(per_page)
            .collect();
        Page {
            total,
            page: self.page,
            per_page,
            items,
        }
    }
}

/// One page of a list.
#[derive(Debug, Serialize)]
struct Page<T> {
    /// Rows matching the search, over every page.
    total: usize,
    page: usize,
    per_page: usize,
    items: Vec<T>,
}

/// `GET /api/halted?q=&page=&per_page=&category=`: halted partitions and
/// parked keys, searchable by category, key, group and error.
async fn halted(State(console): State<Shared>, Query(paging): Query<Paging>) -> ApiResult<Page<HaltView>> {
    let halts = match &paging.category {
        Some(category) => console.ctx.admin.halted_in(category).await?,
        None => console.ctx.admin.halted().await?,
    };
    let mut views: Vec<HaltView> = halts
        .iter()
        .filter(|halt| paging.matches(&[&halt.category, &halt.key, &halt.group, &halt.error]))
        .map(HaltView::from)
        .collect();
    views.sort_by(|a, b| (&a.category, &a.key, &a.group).cmp(&(&b.category, &b.key, &b.group)));
    Ok(Json(paging.cut(views)))
}

/// A partition and each group's position on it.
#[derive(Debug, Serialize)]
struct PartitionView {
    key: String,
    lanes: Vec<&'static str>,
    /// How long ago its newest entry was added.
    idle_ms: Option<u64>,
    groups: Vec<PositionView>,
}

#[derive(Debug, Serialize)]
struct PositionView {
    group: String,
    owner: Option<String>,
    generation: Option<u64>,
    lag: u64,
    pending: u64,
    halted: bool,
}

/// `GET /api/partitions?category=&q=&page=&per_page=`: the partitions of a
/// category, searchable by key; only the page's partitions are read.
async fn partitions(
    State(console): State<Shared>,
    Query(paging): Query<Paging>,
) -> ApiResult<Page<PartitionView>> {
    let Some(category) = paging.category.as_deref() else {
        return Err(ApiError::new(
            StatusCode::BAD_REQUEST,
            "give ?category=".to_owned(),
        ));
    };
    let ctx = &console.ctx;
    ctx.ensure_category(category).await?;
    let mut keys: Vec<String> = ctx
        .status
        .partition_keys(category)
        .await?
        .into_iter()
        .filter(|key| paging.matches(&[key]))
        .collect();
    keys.sort_unstable();
    let page = paging.cut(keys);
    let groups = ctx.status.groups(category).await?;
    let statuses = ctx.status.partitions_of(category, &page.items, &groups).await?;
    let items = statuses
        .into_iter()
        .map(|partition| PartitionView {
            key: partition.key,
            lanes: partition.lanes.iter().map(|lane| lane_name(lane.lane)).collect(),
            idle_ms: partition
                .idle_for
                .map(|idle| u64::try_from(idle.as_millis()).unwrap_or(u64::MAX)),
            groups: partition
                .groups
                .into_iter()
                .map(|position| PositionView {
                    owner: position.owner.as_ref().map(|owner| owner.instance.clone()),
                    generation: position.owner.as_ref().map(|owner| owner.token),
                    group: position.group,
                    lag: position.lag,
                    pending: position.pending,
                    halted: position.halt.is_some(),
                })
                .collect(),
        })
        .collect();
    Ok(Json(Page {
        total: page.total,
        page: page.page,
        per_page: page.per_page,
        items,
    }))
}

/// Which key (and group) a request is about.
#[derive(Debug, Deserialize)]
struct KeyQuery {
    category: String,
    key: String,
    group: Option<String>,
}

/// `GET /api/inspect?category=&key=&group=`: `ordo inspect --json`.
async fn inspect_key(
    State(console): State<Shared>,
    Query(query): Query<KeyQuery>,
) -> ApiResult<inspect::Inspected> {
    let group = query.group.as_deref().filter(|group| !group.is_empty());
    Ok(Json(
        inspect::inspected(&console.ctx, &query.category, &query.key, group).await?,
    ))
}

/// `GET /api/dlq?category=&q=&page=&per_page=`: the category's dead
/// letters (of its first 5,000), searchable by key, handler, type and error.
async fn dead_letters(
    State(console): State<Shared>,
    Query(paging): Query<Paging>,
) -> ApiResult<Page<dlq::DeadLetterView>> {
    let Some(category) = paging.category.as_deref() else {
        return Err(ApiError::new(
            StatusCode::BAD_REQUEST,
            "give ?category=".to_owned(),
        ));
    };
    console.ctx.ensure_category(category).await?;
    let letters = dlq::listed(&console.ctx, category, DEAD_LETTERS_READ)
        .await?
        .into_iter()
        .filter(|letter| {
            paging.matches(&[
                letter.key.as_deref().unwrap_or_default(),
                &letter.group,
                &letter.error,
                letter.message.type_name.as_deref().unwrap_or_default(),
            ])
        })
        .collect();
    Ok(Json(paging.cut(letters)))
}

/// The body of an action.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ActionRequest {
    category: String,
    key: String,
    group: Option<String>,
    /// The halted head the operator saw (retry, skip, dead-letter).
    head: Option<String>,
}

/// `POST /api/{retry,skip,dead-letter,replay}`.
async fn act_on(
    State(console): State<Shared>,
    Path(action): Path<String>,
    headers: HeaderMap,
    body: axum::body::Bytes,
) -> Result<Response, ApiError> {
    let decision = match console.admit(&action, &headers) {
        Ok(decision) => decision,
        Err(denied) => {
            tracing::warn!(
                event = log_events::CONSOLE_ACTION_DENIED,
                action = %action,
                status = denied.status.as_u16(),
                reason = %denied.message,
                "a console action was refused"
            );
            return Err(denied);
        }
    };
    let request: ActionRequest = serde_json::from_slice(&body).map_err(|error| {
        ApiError::new(
            StatusCode::BAD_REQUEST,
            format!("the action's JSON body: {error}"),
        )
    })?;
    let group = request.group.as_deref().filter(|group| !group.is_empty());
    let ctx = &console.ctx;
    let done = match decision {
        None => dlq::replay_partition(ctx, &request.category, &request.key, group)
            .await
            .and_then(|report| serde_json::to_value(report).map_err(|e| Failure::Error(e.into()))),
        Some(action) => {
            let Some(head) = request.head.as_deref() else {
                return Err(ApiError::new(
                    StatusCode::BAD_REQUEST,
                    "give `head`: the halted head the action is about (as `ordo inspect` shows it)"
                        .to_owned(),
                ));
            };
            act::decide(ctx, action, &request.category, &request.key, group, head)
                .await
                .and_then(|acted| serde_json::to_value(acted).map_err(|e| Failure::Error(e.into())))
        }
    };
    match done {
        Ok(value) => {
            tracing::info!(
                event = log_events::CONSOLE_ACTION,
                action = %action,
                category = %request.category,
                key = %request.key,
                group = group.unwrap_or("-"),
                head = request.head.as_deref().unwrap_or("-"),
                outcome = "applied",
                "a console action was applied"
            );
            // The next status shows what the action changed.
            *console.snapshot.lock().await = None;
            Ok(Json(value).into_response())
        }
        Err(failure) => {
            let error = ApiError::from(failure);
            tracing::warn!(
                event = log_events::CONSOLE_ACTION,
                action = %action,
                category = %request.category,
                key = %request.key,
                group = group.unwrap_or("-"),
                head = request.head.as_deref().unwrap_or("-"),
                outcome = "refused",
                reason = %ordo_core::contract::text::log_text(&error.message),
                "a console action was refused"
            );
            Err(error)
        }
    }
}

impl Console {
    /// Whether `action` may run for a request with `headers`: a known
    /// action, actions allowed, same origin, a JSON body, the token. The
    /// decision on a halted head it names, or `None` for a replay.
    fn admit(&self, action: &str, headers: &HeaderMap) -> Result<Option<Action>, ApiError> {
        let decision = match action {
            "retry" => Some(Action::Retry),
            "skip" => Some(Action::Skip),
            "dead-letter" => Some(Action::DeadLetter),
            "replay" => None,
            _ => {
                return Err(ApiError::new(
                    StatusCode::NOT_FOUND,
                    format!("no action `{action}`: retry, skip, dead-letter or replay"),
                ));
            }
        };
        let Some(token) = &self.token else {
            return Err(ApiError::new(
                StatusCode::FORBIDDEN,
                "the console is read-only: start it with --allow-actions (and ORDO_CONSOLE_TOKEN) to act from it"
                    .to_owned(),
            ));
        };
        let text = |name: header::HeaderName| headers.get(name).and_then(|value| value.to_str().ok());
        if let Some(site) = headers
            .get("sec-fetch-site")
            .and_then(|value| value.to_str().ok())
            && !matches!(site, "same-origin" | "none")
        {
            return Err(ApiError::new(
                StatusCode::FORBIDDEN,
                format!("cross-site request refused (Sec-Fetch-Site: {site})"),
            ));
        }
        if let Some(origin) = text(header::ORIGIN) {
            let host = text(header::HOST).unwrap_or_default();
            if origin != format!("http://{host}") {
                return Err(ApiError::new(
                    StatusCode::FORBIDDEN,
                    format!("cross-origin request refused (Origin {origin:?} is not this console's)"),
                ));
            }
        }
        if !text(header::CONTENT_TYPE).is_some_and(|kind| kind.starts_with("application/json")) {
            return Err(ApiError::new(
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                "an action's body is JSON (Content-Type: application/json)".to_owned(),
            ));
        }
        let presented = text(header::AUTHORIZATION)
            .and_then(|value| value.strip_prefix("Bearer "))
            .unwrap_or_default();
        if presented.is_empty() {
            return Err(ApiError::new(
                StatusCode::UNAUTHORIZED,
                "an action needs the console token (Authorization: Bearer <ORDO_CONSOLE_TOKEN>)".to_owned(),
            ));
        }
        if !bool::from(presented.as_bytes().ct_eq(token.as_bytes())) {
            return Err(ApiError::new(
                StatusCode::UNAUTHORIZED,
                "the console token is wrong".to_owned(),
            ));
        }
        Ok(decision)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn actions_need_a_token_long_enough() {
        let missing = token_from(None).unwrap_err();
        assert!(matches!(&missing, Failure::Usage(text) if text.contains("ORDO_CONSOLE_TOKEN")));
        let short = token_from(Some("short".to_owned())).unwrap_err();
        assert!(matches!(&short, Failure::Usage(text) if text.contains("too short")));
        assert_eq!(
            token_from(Some(" 0123456789abcdef \n".to_owned()))
                .ok()
                .as_deref(),
            Some("0123456789abcdef")
        );
    }

    #[test]
    fn a_page_is_cut_from_the_matching_rows() {
        let paging = Paging {
            q: "B".to_owned(),
            page: 1,
            per_page: Some(2),
            category: None,
        };
        let rows: Vec<&str> = ["ab", "b1", "cb", "d", "bb"]
            .into_iter()
            .filter(|row| paging.matches(&[row]))
            .collect();
        let page = paging.cut(rows);
        assert_eq!((page.total, page.items), (4, vec!["cb", "bb"]));
    }
}
