//! The `ordo` binary takes a Redis Cluster URL wherever it takes a Redis URL,
//! and a malformed URL is a usage error that says where the URL came from.

use crate::common;

use common::ordo_in;

#[tokio::test]
async fn a_malformed_redis_url_is_a_usage_error_naming_its_source() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let flag = ordo_in(
        dir.path(),
        &["status", "--redis-url", "redis-cluster://a:1,,b:2"],
        &[],
    )
    .await?
    .expect_code(2)?;
    assert!(
        flag.stderr.contains("--redis-url: ")
            && flag
                .stderr
                .contains("\"redis-cluster://a:1,,b:2\" is not a valid Redis URL")
            && flag.stderr.contains("node 2 of the list is empty"),
        "{}",
        flag.stderr
    );
    let env = ordo_in(dir.path(), &["status"], &[("REDIS_URL", "localhost:6379")])
        .await?
        .expect_code(2)?;
    assert!(
        env.stderr.contains("REDIS_URL: ")
            && env.stderr.contains("\"localhost:6379\" is not a valid Redis URL"),
        "{}",
        env.stderr
    );

    std::fs::write(
        dir.path().join("domain.toml"),
        "[redis]\nurl = \"redis-cluster://a:1,b\"\n",
    )?;
    let file = ordo_in(dir.path(), &["status"], &[]).await?.expect_code(2)?;
    assert!(
        file.stderr.contains("`[redis] url` in ")
            && file.stderr.contains("domain.toml: ")
            && file.stderr.contains("node 2 (\"b\") has no port"),
        "{}",
        file.stderr
    );
    Ok(())
}

#[tokio::test]
async fn status_reads_a_cluster_named_by_its_nodes() -> anyhow::Result<()> {
    let cluster = ordo_testkit::RedisCluster::start()?;
    let url = cluster.url();
    let dir = tempfile::tempdir()?;
    let status = ordo_in(dir.path(), &["status", "--redis-url", &url], &[])
        .await?
        .expect_code(0)?;
    assert_eq!(status.stdout, format!("no Ordo categories found in {url}\n"));
    std::fs::write(
        dir.path().join("domain.toml"),
        format!("[redis]\nurl = {url:?}\n"),
    )?;
    let status = ordo_in(dir.path(), &["status"], &[]).await?.expect_code(0)?;
    assert_eq!(status.stdout, format!("no Ordo categories found in {url}\n"));
    Ok(())
}
