//! The health-probe example (`examples/health_probes.rs`) is what users
//! copy to serve `/livez` and `/readyz`: run as a process with few file
//! descriptors, flooded with connections it cannot accept, it logs and goes
//! on serving once they close; a client that never finishes its request
//! headers is disconnected. (`cargo test` builds the example first.)

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The example binary, built beside this test's.
fn example() -> PathBuf {
    ordo_testkit::example_binary("health_probes")
}

/// A local address nothing listens on (yet).
fn free_address() -> SocketAddr {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("a free port");
    listener.local_addr().expect("its address")
}

/// The example serving on `address`, with at most `files` open files, and
/// what it logged so far.
struct Server {
    child: Child,
    log: Arc<Mutex<String>>,
}

impl Server {
    fn start(address: SocketAddr, files: u32) -> Self {
        let mut child = Command::new("sh")
            .arg("-c")
            .arg(format!("ulimit -n {files} && exec \"$0\" {address}"))
            .arg(example())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("sh runs the example");
        let log = Arc::new(Mutex::new(String::new()));
        let mut stderr = child.stderr.take().expect("a piped stderr");
        let lines = log.clone();
        std::thread::spawn(move || {
            let mut buffer = [0_u8; 4096];
            while let Ok(read @ 1..) = stderr.read(&mut buffer) {
                lines
                    .lock()
                    .unwrap()
                    .push_str(&String::from_utf8_lossy(&buffer[..read]));
            }
        });
        Self { child, log }
    }

    /// Whether it is still running.
    fn running(&mut self) -> bool {
        self.child.try_wait().expect("the child's status").is_none()
    }

    fn log(&self) -> String {
        self.log.lock().unwrap().clone()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `GET path` on `address`: the status line, if it answers.
fn get(address: SocketAddr, path: &str) -> Option<String> {
    let mut stream = TcpStream::connect_timeout(&address, Duration::from_secs(2)).ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: test\r\nConnection: close\r\n\r\n"
    )
    .ok()?;
    let mut reply = String::new();
    stream.read_to_string(&mut reply).ok()?;
    reply.lines().next().map(str::to_owned)
}

/// Waits up to `deadline` for `condition`.
fn wait_for(deadline: Duration, what: &str, mut condition: impl FnMut() -> bool) {
    let start = Instant::now();
    while !condition() {
        assert!(
            start.elapsed() < deadline,
            "timed out after {deadline:?} waiting for {what}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn the_health_example_survives_running_out_of_file_descriptors() {
    let address = free_address();
    let mut server = Server::start(address, 32);
    wait_for(Duration::from_secs(20), "the example to serve /livez", || {
        get(address, "/livez").is_some_and(|line| line.contains("200"))
    });
    // Far more connections than it has file descriptors: those it cannot
    // accept wait in the kernel's backlog; accepting fails (EMFILE).
    let flood: Vec<TcpStream> = (0..100)
        .filter_map(|_| TcpStream::connect_timeout(&address, Duration::from_secs(2)).ok())
        .collect();
    assert!(flood.len() > 40, "only {} connections made", flood.len());
    wait_for(
        Duration::from_secs(20),
        "accepting to fail, or the example to exit",
        || !server.running() || server.log().contains("Too many open files"),
    );
    assert!(
        server.running(),
        "the example exited when it ran out of file descriptors:\n{}",
        server.log()
    );
    drop(flood);
    wait_for(Duration::from_secs(20), "/livez once the flood is gone", || {
        get(address, "/livez").is_some_and(|line| line.contains("200"))
    });
    assert!(server.running());
}

#[test]
fn a_client_that_never_finishes_its_headers_is_disconnected() {
    let address = free_address();
    let _server = Server::start(address, 1024);
    wait_for(Duration::from_secs(20), "the example to serve /livez", || {
        get(address, "/livez").is_some_and(|line| line.contains("200"))
    });
    let mut slow = TcpStream::connect(address).expect("connects");
    slow.write_all(b"GET /livez HTTP/1.1\r\nHost: te")
        .expect("sends a part");
    slow.set_read_timeout(Some(Duration::from_secs(30)))
        .expect("a read timeout");
    let started = Instant::now();
    let mut buffer = [0_u8; 256];
    let read = slow.read(&mut buffer);
    let waited = started.elapsed();
    assert!(
        matches!(read, Ok(0)) || read.is_err() && waited < Duration::from_secs(29),
        "{read:?} after {waited:?}"
    );
    assert!(
        waited < Duration::from_secs(20),
        "disconnected only after {waited:?}"
    );
}
