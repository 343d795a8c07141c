//! The testkit's Redis against a real `redis-server`: every control it offers
//! must have the effect a client would observe.

use std::io::{BufRead, BufReader, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use ordo_testkit::{Redis, TestkitError};

/// One command over raw RESP. Replies read back as: a simple or error line as
/// is (`+OK`, `-ERR ...`), a bulk string's contents, `(nil)`, or an array's
/// elements as a debug list (`["save", ""]`).
fn query(redis: &Redis, args: &[&str]) -> String {
    let mut stream = TcpStream::connect(("127.0.0.1", redis.port())).expect("connect to Redis");
    stream.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut request = format!("*{}\r\n", args.len());
    for arg in args {
        request.push_str(&format!("${}\r\n{arg}\r\n", arg.len()));
    }
    stream.write_all(request.as_bytes()).unwrap();
    read_reply(&mut BufReader::new(stream))
}

fn read_reply(reader: &mut impl BufRead) -> String {
    let mut line = String::new();
    reader.read_line(&mut line).unwrap();
    let line = line.trim_end().to_owned();
    let length = |text: &str| text.parse::<i64>().unwrap();
    if let Some(count) = line.strip_prefix('*').map(length) {
        let items: Vec<String> = (0..count).map(|_| read_reply(reader)).collect();
        return format!("{items:?}");
    }
    match line.strip_prefix('$').map(length) {
        None => line,
        Some(-1) => "(nil)".to_owned(),
        Some(len) => {
            let mut bulk = vec![0; usize::try_from(len).unwrap() + 2];
            reader.read_exact(&mut bulk).unwrap();
            bulk.truncate(bulk.len() - 2);
            String::from_utf8(bulk).unwrap()
        }
    }
}

#[test]
fn a_started_redis_answers_ping_on_its_url() {
    let redis = Redis::start_local().unwrap();
    assert!(!redis.is_external());
    assert_eq!(redis.url(), format!("redis://127.0.0.1:{}", redis.port()));
    redis.ping().unwrap();
    assert_eq!(query(&redis, &["PING"]), "+PONG");
    // No RDB snapshots behind the test's back; the AOF only when asked for.
    assert_eq!(query(&redis, &["CONFIG", "GET", "save"]), r#"["save", ""]"#);
    assert_eq!(
        query(&redis, &["CONFIG", "GET", "appendonly"]),
        r#"["appendonly", "no"]"#
    );
}

#[test]
fn start_uses_redis_url_or_spawns() {
    let redis = Redis::start().unwrap();
    let url_set = std::env::var("REDIS_URL").is_ok_and(|url| !url.trim().is_empty());
    assert_eq!(redis.is_external(), url_set);
    redis.ping().unwrap();
}

#[test]
fn after_kill_ping_fails_and_killing_again_is_harmless() {
    let mut redis = Redis::start_local().unwrap();
    redis.kill().unwrap();
    let error = redis.ping().unwrap_err();
    assert!(matches!(error, TestkitError::Ping { .. }), "{error:?}");
    redis.kill().unwrap();
    let error = redis.pause().unwrap_err();
    assert!(
        matches!(error, TestkitError::NotRunning { action: "pause" }),
        "{error:?}"
    );
}

#[test]
fn a_paused_redis_answers_nothing_until_resumed() {
    let mut redis = Redis::start_local().unwrap();
    redis.pause().unwrap();
    let asked = Instant::now();
    let error = redis.ping_timeout(Duration::from_millis(200)).unwrap_err();
    // A socket timeout counts in kernel ticks and may end up to one tick
    // (1–10 ms) before 200 ms of wall time: the floor leaves that much slack.
    let waited = asked.elapsed();
    assert!(
        waited >= Duration::from_millis(180),
        "failed too early, after {waited:?}: {error:?}"
    );
    let TestkitError::Ping { source, .. } = &error else {
        panic!("expected a PING timeout, got {error:?}")
    };
    assert!(
        matches!(
            source.kind(),
            std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
        ),
        "{source:?}"
    );
    redis.resume().unwrap();
    redis.ping().unwrap();
}

#[test]
fn restart_keeps_the_port_and_append_only_data() {
    let mut redis = Redis::builder().append_only(true).start().unwrap();
    let port = redis.port();
    assert_eq!(query(&redis, &["SET", "testkit:restart", "kept"]), "+OK");
    redis.restart().unwrap();
    assert_eq!(redis.port(), port);
    assert_eq!(query(&redis, &["GET", "testkit:restart"]), "kept");
}

#[test]
fn without_append_only_a_restart_loses_the_data() {
    let mut redis = Redis::start_local().unwrap();
    assert_eq!(query(&redis, &["SET", "testkit:restart", "lost"]), "+OK");
    redis.restart().unwrap();
    assert_eq!(query(&redis, &["GET", "testkit:restart"]), "(nil)");
}

#[test]
fn restart_after_kill_replays_what_was_fsynced() {
    let mut redis = Redis::builder()
        .append_only(true)
        .extra_arg("--appendfsync")
        .extra_arg("always")
        .start()
        .unwrap();
    let port = redis.port();
    assert_eq!(query(&redis, &["SET", "testkit:crash", "survived"]), "+OK");
    redis.kill().unwrap();
    redis.restart().unwrap();
    assert_eq!(redis.port(), port);
    assert_eq!(query(&redis, &["GET", "testkit:crash"]), "survived");
}

#[test]
fn a_paused_redis_can_be_stopped_and_restarted() {
    let mut redis = Redis::start_local().unwrap();
    redis.pause().unwrap();
    redis.stop().unwrap();
    assert!(redis.ping().is_err());
    redis.restart().unwrap();
    redis.ping().unwrap();
}

#[test]
fn parallel_servers_are_independent() {
    let mut first = Redis::start_local().unwrap();
    let second = Redis::start_local().unwrap();
    assert_ne!(first.port(), second.port());
    assert_eq!(query(&first, &["SET", "testkit:whose", "first"]), "+OK");
    assert_eq!(query(&second, &["GET", "testkit:whose"]), "(nil)");
    first.kill().unwrap();
    second.ping().unwrap();
}

#[test]
fn dropping_redis_kills_it() {
    let redis = Redis::start_local().unwrap();
    let port = redis.port();
    drop(redis);
    assert!(
        TcpStream::connect(("127.0.0.1", port)).is_err(),
        "something still listens on {port}"
    );
}

#[test]
fn builder_options_reach_the_server() {
    let redis = Redis::builder()
        .append_only(true)
        .extra_arg("--maxmemory")
        .extra_arg("12345678")
        .start()
        .unwrap();
    assert_eq!(
        query(&redis, &["CONFIG", "GET", "maxmemory"]),
        r#"["maxmemory", "12345678"]"#
    );
    assert_eq!(
        query(&redis, &["CONFIG", "GET", "appendonly"]),
        r#"["appendonly", "yes"]"#
    );
}
