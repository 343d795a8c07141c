//! The `ordo` tool takes a Redis URL with a password from a file or the
//! environment (off the command line, where `ps` shows it) and never prints
//! the password: not in its output, its errors or its `--help`.

use crate::common;

use common::{Output, ordo_in};
use ordo_testkit::Redis;

/// The password of the test's ACL user; no output may contain it.
const PASSWORD: &str = "s3cret-Pa55word";
/// A wrong password; no output may contain it either.
const WRONG: &str = "wr0ng-Pa55word";

/// Fails when either stream of `output` (of `what`) holds a password.
fn assert_secret_kept(what: &str, output: &Output) {
    for text in [&output.stdout, &output.stderr] {
        assert!(
            !text.contains(PASSWORD) && !text.contains(WRONG),
            "{what} shows a password:\nstdout:\n{}\nstderr:\n{}",
            output.stdout,
            output.stderr
        );
    }
}

/// A Redis with an ACL user `ordo` whose password is [`PASSWORD`]; its
/// `host:port`.
async fn redis_with_user() -> anyhow::Result<(Redis, String)> {
    let redis = Redis::start()?;
    redis.create_user("ordo", PASSWORD)?;
    let address = redis.url().trim_start_matches("redis://").to_owned();
    Ok((redis, address))
}

#[tokio::test]
async fn the_url_comes_from_a_file_or_the_environment_and_its_password_is_masked() -> anyhow::Result<()> {
    let (_redis, address) = redis_with_user().await?;
    let url = format!("redis://ordo:{PASSWORD}@{address}");
    let expected = format!("no Ordo categories found in redis://ordo:***@{address}\n");
    let dir = tempfile::tempdir()?;
    let url_file = dir.path().join("redis-url");
    std::fs::write(&url_file, format!("{url}\n"))?;
    let url_file = url_file.to_str().expect("a UTF-8 temporary path");

    let by_flag = ordo_in(dir.path(), &["status", "--redis-url", &url], &[])
        .await?
        .expect_code(0)?;
    assert_secret_kept("--redis-url", &by_flag);
    assert_eq!(by_flag.stdout, expected);

    let by_file = ordo_in(dir.path(), &["status", "--redis-url-file", url_file], &[])
        .await?
        .expect_code(0)?;
    assert_secret_kept("--redis-url-file", &by_file);
    assert_eq!(by_file.stdout, expected);

    let by_env = ordo_in(dir.path(), &["status"], &[("REDIS_URL", &url)])
        .await?
        .expect_code(0)?;
    assert_secret_kept("REDIS_URL", &by_env);
    assert_eq!(by_env.stdout, expected);

    // The flag and the file both name a URL: which one is meant is unclear.
    let both = ordo_in(
        dir.path(),
        &["status", "--redis-url", &url, "--redis-url-file", url_file],
        &[],
    )
    .await?
    .expect_code(2)?;
    assert_secret_kept("a usage error", &both);

    let help = ordo_in(dir.path(), &["--help"], &[("REDIS_URL", &url)])
        .await?
        .expect_code(0)?;
    assert_secret_kept("--help", &help);
    help.expect_stdout("--redis-url-file <PATH>")?;
    Ok(())
}

#[tokio::test]
async fn errors_mask_the_password_of_every_url() -> anyhow::Result<()> {
    let (_redis, address) = redis_with_user().await?;
    let dir = tempfile::tempdir()?;

    let refused = ordo_in(
        dir.path(),
        &["status"],
        &[("REDIS_URL", &format!("redis://ordo:{WRONG}@{address}"))],
    )
    .await?
    .expect_code(1)?;
    assert_secret_kept("a refused connection", &refused);
    refused.expect_stderr(&format!("cannot connect to Redis at redis://ordo:***@{address}"))?;

    let invalid = ordo_in(
        dir.path(),
        &["status"],
        &[("REDIS_URL", &format!("redis://ordo:{WRONG}@{address}:x"))],
    )
    .await?
    .expect_code(2)?;
    assert_secret_kept("an invalid URL", &invalid);
    invalid.expect_stderr("REDIS_URL: ")?;

    // Nothing listens on port 1: the outbox database is unreachable.
    let database_url = format!("postgres://ordo:{WRONG}@127.0.0.1:1/ordo");
    let database_file = dir.path().join("database-url");
    std::fs::write(&database_file, &database_url)?;
    let redis_url = format!("redis://ordo:{PASSWORD}@{address}");
    for args in [
        vec!["status", "--database-url", database_url.as_str()],
        vec![
            "status",
            "--database-url-file",
            database_file.to_str().expect("a UTF-8 temporary path"),
        ],
    ] {
        let unreachable = ordo_in(dir.path(), &args, &[("REDIS_URL", &redis_url)])
            .await?
            .expect_code(1)?;
        assert_secret_kept("an unreachable outbox database", &unreachable);
        unreachable.expect_stderr(
            "cannot connect to the PostgreSQL outbox database at postgres://ordo:***@127.0.0.1:1/ordo",
        )?;
    }

    let empty = dir.path().join("empty");
    std::fs::write(&empty, "\n")?;
    let empty_file = ordo_in(
        dir.path(),
        &[
            "status",
            "--redis-url-file",
            empty.to_str().expect("a UTF-8 temporary path"),
        ],
        &[],
    )
    .await?
    .expect_code(2)?;
    empty_file.expect_stderr("the first line is empty")?;
    Ok(())
}

/// A malformed `[redis] url` line (unquoted, unterminated, a typo in the
/// key) makes domain.toml invalid; the TOML error quotes the line, with
/// its password masked.
#[tokio::test]
async fn a_malformed_url_line_in_domain_toml_is_quoted_with_its_password_masked() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    for line in [
        format!("url = redis://ordo:{PASSWORD}@127.0.0.1:1/0"),
        format!("url = \"redis://ordo:{PASSWORD}@127.0.0.1:1/0"),
        format!("urll = \"redis://ordo:{PASSWORD}@127.0.0.1:1/0\""),
        format!("url = \"redis-sentinel://h:1?sentinelPassword={PASSWORD}\" x"),
    ] {
        std::fs::write(dir.path().join("domain.toml"), format!("[redis]\n{line}\n"))?;
        let invalid = ordo_in(dir.path(), &["status"], &[]).await?.expect_code(1)?;
        assert_secret_kept(&format!("an invalid domain.toml line `{line}`"), &invalid);
        invalid.expect_stderr("invalid ")?;
        if line.starts_with("urll") {
            // An unknown key is named with its file and line, its value not quoted.
            invalid.expect_stderr("domain.toml:2")?;
        } else {
            invalid.expect_stderr("***")?;
        }
    }
    Ok(())
}
