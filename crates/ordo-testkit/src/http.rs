//! Plain HTTP/1.1 requests to the servers tests start (is it ready? what
//! does it answer?), one connection each (`Connection: close`): no client
//! library, nothing hidden between the test and the server.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::{Child, ExitStatus};
use std::time::{Duration, Instant};

use crate::error::{Result, TestkitError};

/// How long one request may take.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

/// Why a server did not become ready (see [`wait_ready`]).
#[derive(Debug)]
pub(crate) enum NotReady {
    /// It exited first, after this long.
    Exited(ExitStatus, Duration),
    /// It was still not ready after this long.
    TimedOut(Duration),
}

/// Waits up to `timeout` until `GET path` of the server `child` runs at
/// `address` answers 200 with a body `ready` accepts; an I/O error checking
/// on `child` is the testkit's error, anything else a [`NotReady`].
pub(crate) fn wait_ready(
    child: &mut Child,
    address: SocketAddr,
    path: &str,
    ready: impl Fn(&str) -> bool,
    timeout: Duration,
) -> Result<Result<(), NotReady>> {
    let started = Instant::now();
    loop {
        if let Some(status) = child
            .try_wait()
            .map_err(TestkitError::io("check on a server the testkit started"))?
        {
            return Ok(Err(NotReady::Exited(status, started.elapsed())));
        }
        if let Ok((200, body)) = get(address, path)
            && ready(&body)
        {
            return Ok(Ok(()));
        }
        if started.elapsed() > timeout {
            return Ok(Err(NotReady::TimedOut(started.elapsed())));
        }
        std::thread::sleep(crate::wait::POLL_INTERVAL);
    }
}

/// `GET path` of the server at `address`: the status code and the body.
pub fn get(address: SocketAddr, path: &str) -> Result<(u16, String)> {
    request(address, "GET", path, &[], "")
}

/// `method path` of the server at `address` with `headers` and `body`: the
/// status code and the body of the answer.
pub fn request(
    address: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> Result<(u16, String)> {
    let what = || format!("{method} http://{address}{path}");
    let io = |source| TestkitError::Io { what: what(), source };
    let mut stream = TcpStream::connect_timeout(&address, REQUEST_TIMEOUT).map_err(io)?;
    stream.set_read_timeout(Some(REQUEST_TIMEOUT)).map_err(io)?;
    let mut head = format!("{method} {path} HTTP/1.1\r\nHost: {address}\r\nConnection: close\r\n");
    for (name, value) in headers {
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    head.push_str(&format!("Content-Length: {}\r\n\r\n", body.len()));
    stream.write_all(head.as_bytes()).map_err(io)?;
    stream.write_all(body.as_bytes()).map_err(io)?;
    // Read until the body is whole: its Content-Length when it says one
    // (a server may keep the connection open regardless), else to the end.
    let mut response = Vec::new();
    let mut buffer = [0_u8; 8192];
    loop {
        let read = stream.read(&mut buffer).map_err(io)?;
        if read == 0 {
            break;
        }
        response.extend_from_slice(&buffer[..read]);
        if let Some(end) = find(&response, b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&response[..end]);
            let length = head.lines().find_map(|line| {
                let (name, value) = line.split_once(':')?;
                name.eq_ignore_ascii_case("content-length")
                    .then(|| value.trim().parse::<usize>().ok())
                    .flatten()
            });
            if length.is_some_and(|length| response.len() >= end + 4 + length) {
                break;
            }
        }
    }
    let response = String::from_utf8_lossy(&response);
    let (head, body) = response.split_once("\r\n\r\n").unwrap_or((&response, ""));
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|code| code.parse().ok())
        .ok_or_else(|| TestkitError::Io {
            what: what(),
            source: std::io::Error::other(format!("not an HTTP response: {head:?}")),
        })?;
    let chunked = head
        .lines()
        .any(|line| line.to_ascii_lowercase().replace(' ', "") == "transfer-encoding:chunked");
    Ok((status, if chunked { dechunk(body) } else { body.to_owned() }))
}

/// Where `needle` starts in `haystack`.
fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|window| window == needle)
}

/// A chunked body's content.
fn dechunk(mut body: &str) -> String {
    let mut content = String::new();
    while let Some((size, rest)) = body.split_once("\r\n") {
        let size = usize::from_str_radix(size.split(';').next().unwrap_or("").trim(), 16).unwrap_or(0);
        if size == 0 || rest.len() < size {
            break;
        }
        content.push_str(&rest[..size]);
        body = rest[size..].strip_prefix("\r\n").unwrap_or(&rest[size..]);
    }
    content
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_chunked_body_is_put_together() {
        assert_eq!(
            super::dechunk("4\r\nWiki\r\n6;x=y\r\npedia \r\n0\r\n\r\n"),
            "Wikipedia "
        );
    }
}
