//! The counters against a real Redis: what `INFO` counts and what `MONITOR` sees.

use std::time::{Duration, Instant};

use anyhow::{Result, ensure};
use fred::prelude::{ClientLike as _, LuaInterface as _};
use ordo_bench::monitor::CommandMonitor;
use ordo_bench::redis::{TlsPaths, connect};
use ordo_bench::stats::RedisStats;
use ordo_testkit::Redis;

/// A script that runs three commands of its own.
const SCRIPT: &str = "for i = 1, 3 do redis.call('INCR', KEYS[1]) end return 1";

#[tokio::test]
async fn info_counts_the_commands_a_script_runs() -> Result<()> {
    // A server of its own: the exact counts must not include anyone else's commands.
    let redis = Redis::start_local()?;
    let client = connect(&redis.url(), &TlsPaths::default()).await?;
    let before = RedisStats::read(&client).await?;
    let _: i64 = client.eval(SCRIPT, vec!["counter"], Vec::<String>::new()).await?;
    let delta = RedisStats::read(&client).await?.since(&before);
    assert_eq!(delta.commands, 4, "{delta:?}");
    assert_eq!(delta.calls_of("eval"), 1, "{delta:?}");
    assert_eq!(delta.calls_of("incr"), 3, "{delta:?}");
    assert_eq!(delta.calls_of("info"), 0, "{delta:?}");
    Ok(())
}

#[tokio::test]
async fn monitor_counts_what_clients_send_apart_from_what_scripts_run() -> Result<()> {
    let redis = Redis::start_local()?;
    let client = connect(&redis.url(), &TlsPaths::default()).await?;
    let monitor = CommandMonitor::start(&redis.url())?;
    let _: i64 = client.eval(SCRIPT, vec!["counter"], Vec::<String>::new()).await?;
    let _: String = client.ping(None).await?;

    // MONITOR lines arrive on their own connection: poll until all five are in.
    let (mut sent, mut scripted, mut commands) = (0, 0, Vec::new());
    let deadline = Instant::now() + Duration::from_secs(5);
    while sent < 2 || scripted < 3 {
        ensure!(
            Instant::now() < deadline,
            "MONITOR saw {sent} sent and {scripted} scripted commands"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
        let counts = monitor.take();
        sent += counts.client_commands;
        scripted += counts.script_commands;
        commands.extend(counts.by_command.into_keys());
    }
    assert_eq!((sent, scripted), (2, 3));
    assert_eq!(commands, ["eval", "ping"]);
    Ok(())
}
