//! Connection URLs with their secrets masked, for every place a URL is shown.
//!
//! A Redis (or PostgreSQL) URL may carry a password in its user info
//! (`redis://user:password@host`) or in its query (`sentinelPassword=...`,
//! libpq's `password=...`). Logs, errors, `Debug` output and the `ordo`
//! tool's output show a URL only through [`redact_url`] or [`SecretUrl`].

use std::fmt;

/// The mask that stands for a secret.
const MASK: &str = "***";

/// `url` with its secrets replaced by `***`: the password of the user info
/// (`redis://user:***@host`; a user info without `:` is masked whole, as some
/// providers put a token there), and the value of every query parameter
/// whose name contains `password` (`?sentinelPassword=***`). A libpq
/// keyword string (`host=h password=pw`) gets its `password` value masked.
///
/// ```
/// use ordo_redis::redact_url;
///
/// assert_eq!(redact_url("rediss://app:s3cret@h:6380/0"), "rediss://app:***@h:6380/0");
/// assert_eq!(
///     redact_url("redis-sentinel://h:26379?sentinelServiceName=m&sentinelPassword=pw"),
///     "redis-sentinel://h:26379?sentinelServiceName=m&sentinelPassword=***"
/// );
/// ```
pub fn redact_url(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return redact_keywords(url);
    };
    let authority_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(authority_end);
    let mut redacted = format!("{scheme}://");
    match authority.rsplit_once('@') {
        Some((userinfo, hosts)) => {
            if let Some((user, _)) = userinfo.split_once(':') {
                redacted.push_str(user);
                redacted.push(':');
            }
            redacted.push_str(MASK);
            redacted.push('@');
            redacted.push_str(hosts);
        }
        None => redacted.push_str(authority),
    }
    redacted.push_str(&redact_query(tail));
    redacted
}

/// The path, query and fragment of a URL with password parameters masked.
fn redact_query(tail: &str) -> String {
    let Some((path, query)) = tail.split_once('?') else {
        return tail.to_owned();
    };
    let (query, fragment) = match query.split_once('#') {
        Some((query, fragment)) => (query, Some(fragment)),
        None => (query, None),
    };
    let parameters: Vec<String> = query
        .split('&')
        .map(|parameter| match parameter.split_once('=') {
            Some((name, _)) if is_password(name) => format!("{name}={MASK}"),
            _ => parameter.to_owned(),
        })
        .collect();
    let mut redacted = format!("{path}?{}", parameters.join("&"));
    if let Some(fragment) = fragment {
        redacted.push('#');
        redacted.push_str(fragment);
    }
    redacted
}

/// A libpq keyword/value string with the `password` value masked.
fn redact_keywords(text: &str) -> String {
    text.split(' ')
        .map(|word| match word.split_once('=') {
            Some((name, _)) if is_password(name) => format!("{name}={MASK}"),
            _ => word.to_owned(),
        })
        .collect::<Vec<_>>()
        .join(" ")
}

fn is_password(name: &str) -> bool {
    name.to_ascii_lowercase().contains("password")
}

/// A connection URL that keeps its secrets: its [`Debug`] and [`Display`](fmt::Display)
/// show it through [`redact_url`]; only [`SecretUrl::expose`] gives the URL
/// itself, for connecting.
#[derive(Clone, PartialEq, Eq)]
pub struct SecretUrl(String);

impl SecretUrl {
    /// Wraps `url`.
    pub fn new(url: impl Into<String>) -> Self {
        Self(url.into())
    }

    /// The URL itself, secrets included: pass it to a client, never to a
    /// log line or a message.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl From<String> for SecretUrl {
    fn from(url: String) -> Self {
        Self(url)
    }
}

impl From<&str> for SecretUrl {
    fn from(url: &str) -> Self {
        Self(url.to_owned())
    }
}

impl fmt::Debug for SecretUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&redact_url(&self.0), f)
    }
}

impl fmt::Display for SecretUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&redact_url(&self.0))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passwords_are_masked_in_urls() {
        for (url, redacted) in [
            ("redis://127.0.0.1:6379/0", "redis://127.0.0.1:6379/0"),
            ("redis://:s3cret@host:6379", "redis://:***@host:6379"),
            ("redis://app:s3cret@host/1", "redis://app:***@host/1"),
            ("redis://token@host", "redis://***@host"),
            ("rediss://app:p%40ss@host", "rediss://app:***@host"),
            ("redis://app:a:b@c@host", "redis://app:***@host"),
            (
                "redis-cluster://me:s3cret@a:1,,b:2",
                "redis-cluster://me:***@a:1,,b:2",
            ),
            ("redis://h:1/0?x=a@b", "redis://h:1/0?x=a@b"),
            (
                "redis-sentinel://u:p@h:1/0?node=h:2&sentinelPassword=s3cret#f",
                "redis-sentinel://u:***@h:1/0?node=h:2&sentinelPassword=***#f",
            ),
            (
                "postgres://ordo:s3cret@db/app?password=s3cret&sslmode=require",
                "postgres://ordo:***@db/app?password=***&sslmode=require",
            ),
            (
                "host=db password=s3cret user=ordo",
                "host=db password=*** user=ordo",
            ),
            ("not a url", "not a url"),
        ] {
            assert_eq!(redact_url(url), redacted, "{url}");
        }
    }

    #[test]
    fn a_secret_url_shows_only_the_redacted_form() {
        let url = SecretUrl::new("redis://app:s3cret@host:6379/0");
        assert_eq!(format!("{url:?}"), "\"redis://app:***@host:6379/0\"");
        assert_eq!(url.to_string(), "redis://app:***@host:6379/0");
        assert_eq!(url.expose(), "redis://app:s3cret@host:6379/0");
    }
}
