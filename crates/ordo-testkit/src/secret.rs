//! URLs from the environment (`REDIS_URL`, `DATABASE_URL`...) shown with
//! their passwords masked, in errors and `Debug` output alike.

use std::fmt;

/// `url` with the password of its user info (and any `password` query
/// parameter) replaced by `***`.
pub(crate) fn redact(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_owned();
    };
    let authority_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(authority_end);
    let authority = match authority.rsplit_once('@') {
        Some((userinfo, hosts)) => match userinfo.split_once(':') {
            Some((user, _)) => format!("{user}:***@{hosts}"),
            None => format!("***@{hosts}"),
        },
        None => authority.to_owned(),
    };
    let tail = match tail.split_once('?') {
        Some((path, query)) => {
            let query: Vec<String> = query
                .split('&')
                .map(|parameter| match parameter.split_once('=') {
                    Some((name, _)) if name.to_ascii_lowercase().contains("password") => {
                        format!("{name}=***")
                    }
                    _ => parameter.to_owned(),
                })
                .collect();
            format!("{path}?{}", query.join("&"))
        }
        None => tail.to_owned(),
    };
    format!("{scheme}://{authority}{tail}")
}

/// A URL whose `Debug` shows it redacted.
#[derive(Clone, PartialEq, Eq)]
pub(crate) struct SecretUrl(pub(crate) String);

impl fmt::Debug for SecretUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&redact(&self.0), f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passwords_are_masked() {
        assert_eq!(redact("redis://u:s3cret@h:1/0"), "redis://u:***@h:1/0");
        assert_eq!(redact("redis://:s3cret@h:1"), "redis://:***@h:1");
        assert_eq!(redact("redis://tok@h"), "redis://***@h");
        assert_eq!(
            redact("postgres://h/db?password=s3cret&x=1"),
            "postgres://h/db?password=***&x=1"
        );
        assert_eq!(redact("redis://h:1"), "redis://h:1");
        assert_eq!(
            format!("{:?}", SecretUrl("redis://u:s3cret@h:1".to_owned())),
            "\"redis://u:***@h:1\""
        );
    }
}
