//! Just enough of the Redis protocol to ask a server whether it is alive.
//!
//! The testkit speaks RESP over a std `TcpStream` on purpose: readiness checks
//! must not depend on the Redis client under test, nor on an async runtime.

use std::fmt;
use std::io::{self, BufRead, BufReader, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::time::Duration;

use url::{Host, ParseError, Url};

use crate::error::{Result, TestkitError};

/// Where a Redis listens, and how to log in to it.
#[derive(Clone)]
pub(crate) struct Endpoint {
    pub(crate) host: String,
    pub(crate) port: u16,
    auth: Option<Auth>,
}

/// Credentials from a `redis://user:password@...` URL.
#[derive(Clone)]
struct Auth {
    username: Option<String>,
    password: String,
}

// Hand-written so that a password never lands in a test log.
impl fmt::Debug for Endpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Endpoint")
            .field("host", &self.host)
            .field("port", &self.port)
            .field("auth", &self.auth.as_ref().map(|_| "<redacted>"))
            .finish()
    }
}

impl fmt::Display for Endpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.host.contains(':') {
            write!(f, "[{}]:{}", self.host, self.port)
        } else {
            write!(f, "{}:{}", self.host, self.port)
        }
    }
}

impl Endpoint {
    /// A server on this host and port that needs no login.
    pub(crate) fn new(host: impl Into<String>, port: u16) -> Self {
        Endpoint {
            host: host.into(),
            port,
            auth: None,
        }
    }

    /// Parses `redis://[[user]:password@]host[:port][/db]`; the port defaults to 6379.
    ///
    /// Only the `redis://` scheme is accepted: the testkit's PING speaks plain TCP.
    pub(crate) fn parse(text: &str) -> Result<Self, &'static str> {
        const PORT: &str = "the port is not a number in 1..=65535";
        let url = Url::parse(text).map_err(|error| match error {
            ParseError::EmptyHost => "the host is missing",
            ParseError::InvalidPort => PORT,
            ParseError::InvalidIpv6Address => "an IPv6 host is missing its closing ']'",
            _ => "not a URL",
        })?;
        if url.scheme() != "redis" {
            return Err("only the redis:// scheme is supported");
        }
        let host = match url.host() {
            Some(Host::Ipv6(address)) => address.to_string(),
            Some(host) => host.to_string(),
            None => return Err("the host is missing"),
        };
        let port = match url.port() {
            Some(0) => return Err(PORT),
            port => port.unwrap_or(6379),
        };
        check_database(url.path())?;
        let auth = match url.password() {
            // `user` alone: no AUTH.
            None => None,
            Some(password) => Some(Auth {
                username: Some(percent_decode(url.username())?).filter(|name| !name.is_empty()),
                password: percent_decode(password)?,
            }),
        };
        Ok(Endpoint { host, port, auth })
    }

    /// Sends PING (after AUTH when the URL had credentials) and expects `+PONG`.
    ///
    /// `timeout` bounds the connect and each read and write, so a stopped
    /// (SIGSTOP) server makes this fail after about `timeout` instead of hanging.
    pub(crate) fn ping(&self, timeout: Duration) -> Result<()> {
        let io_error = |source| TestkitError::Ping {
            addr: self.to_string(),
            source,
        };
        let stream = self.connect(timeout).map_err(io_error)?;
        let mut reader = BufReader::new(&stream);
        if let Some(auth) = &self.auth {
            let mut args = vec!["AUTH"];
            args.extend(auth.username.as_deref());
            args.push(&auth.password);
            let reply = round_trip(&stream, &mut reader, &args).map_err(io_error)?;
            self.expect("AUTH", reply, "+OK")?;
        }
        let reply = round_trip(&stream, &mut reader, &["PING"]).map_err(io_error)?;
        self.expect("PING", reply, "+PONG")
    }

    /// Sends one command (after AUTH when the URL had credentials) and reads its reply.
    ///
    /// An error reply (`-ERR ...`) is returned as [`Reply::Error`], not as an
    /// `Err`: the caller knows which errors it expects. `timeout` bounds the
    /// connect and each read and write.
    pub(crate) fn command(&self, args: &[&str], timeout: Duration) -> Result<Reply> {
        let io_error = |source| TestkitError::Command {
            addr: self.to_string(),
            command: args.join(" "),
            source,
        };
        let stream = self.connect(timeout).map_err(io_error)?;
        let mut reader = BufReader::new(&stream);
        if let Some(auth) = &self.auth {
            let mut auth_args = vec!["AUTH"];
            auth_args.extend(auth.username.as_deref());
            auth_args.push(&auth.password);
            let reply = round_trip(&stream, &mut reader, &auth_args).map_err(io_error)?;
            self.expect("AUTH", reply, "+OK")?;
        }
        write_command(&stream, args).map_err(io_error)?;
        read_reply(&mut reader).map_err(io_error)
    }

    fn connect(&self, timeout: Duration) -> io::Result<TcpStream> {
        let mut last_error = None;
        for addr in (self.host.as_str(), self.port).to_socket_addrs()? {
            match TcpStream::connect_timeout(&addr, timeout) {
                Ok(stream) => {
                    stream.set_read_timeout(Some(timeout))?;
                    stream.set_write_timeout(Some(timeout))?;
                    return Ok(stream);
                }
                Err(error) => last_error = Some(error),
            }
        }
        Err(last_error.unwrap_or_else(|| io::Error::new(io::ErrorKind::NotFound, "host has no address")))
    }

    fn expect(&self, command: &'static str, reply: String, expected: &str) -> Result<()> {
        if reply == expected {
            Ok(())
        } else {
            Err(TestkitError::UnexpectedReply {
                addr: self.to_string(),
                command,
                reply,
            })
        }
    }
}

/// A decoded RESP2 reply.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Reply {
    /// `+OK`
    Simple(String),
    /// `-ERR ...`, without the `-`.
    Error(String),
    /// `:1`
    Integer(i64),
    /// `$n` followed by the data; `None` for `$-1`.
    Bulk(Option<String>),
    /// `*n` followed by n replies; `None` for `*-1`.
    Array(Option<Vec<Reply>>),
}

impl Reply {
    /// The text of a simple string or bulk string reply.
    pub(crate) fn text(&self) -> Option<&str> {
        match self {
            Reply::Simple(text) | Reply::Bulk(Some(text)) => Some(text),
            _ => None,
        }
    }
}

/// Writes one command as a RESP array of bulk strings.
fn write_command(mut stream: &TcpStream, args: &[&str]) -> io::Result<()> {
    let mut request = format!("*{}\r\n", args.len());
    for arg in args {
        request.push_str(&format!("${}\r\n{arg}\r\n", arg.len()));
    }
    stream.write_all(request.as_bytes())
}

/// Reads one line without its CRLF.
fn read_line(reader: &mut impl BufRead) -> io::Result<String> {
    let mut line = String::new();
    if reader.read_line(&mut line)? == 0 {
        return Err(io::Error::new(
            io::ErrorKind::UnexpectedEof,
            "connection closed before a reply",
        ));
    }
    Ok(line.trim_end_matches(['\r', '\n']).to_owned())
}

/// Reads one whole reply, nested arrays included.
fn read_reply(reader: &mut impl BufRead) -> io::Result<Reply> {
    let line = read_line(reader)?;
    let malformed = || {
        io::Error::new(
            io::ErrorKind::InvalidData,
            format!("malformed reply line {line:?}"),
        )
    };
    let (kind, rest) = line.split_at_checked(1).ok_or_else(malformed)?;
    let length = || rest.parse::<i64>().map_err(|_| malformed());
    Ok(match kind {
        "+" => Reply::Simple(rest.to_owned()),
        "-" => Reply::Error(rest.to_owned()),
        ":" => Reply::Integer(length()?),
        "$" => match usize::try_from(length()?) {
            Err(_) => Reply::Bulk(None),
            Ok(len) => {
                let mut data = vec![0; len + 2];
                reader.read_exact(&mut data)?;
                data.truncate(len);
                Reply::Bulk(Some(String::from_utf8_lossy(&data).into_owned()))
            }
        },
        "*" => match usize::try_from(length()?) {
            Err(_) => Reply::Array(None),
            Ok(count) => Reply::Array(Some(
                (0..count)
                    .map(|_| read_reply(reader))
                    .collect::<io::Result<_>>()?,
            )),
        },
        _ => return Err(malformed()),
    })
}

/// Writes one command and reads a one-line reply (simple string or error), without its CRLF.
fn round_trip(stream: &TcpStream, reader: &mut impl BufRead, args: &[&str]) -> io::Result<String> {
    write_command(stream, args)?;
    read_line(reader)
}

/// Accepts an empty path, `/` or `/<number>`.
fn check_database(path: &str) -> Result<(), &'static str> {
    let database = path.strip_prefix('/').unwrap_or(path);
    if database.is_empty() || database.parse::<u32>().is_ok() {
        Ok(())
    } else {
        Err("the path after the port must be a database number")
    }
}

/// Decodes a URL's user name or password. `url` keeps a malformed escape
/// as text; a credential with one is refused instead, since it is almost
/// certainly a typo.
fn percent_decode(text: &str) -> Result<String, &'static str> {
    let malformed = text.match_indices('%').any(|(at, _)| {
        text.as_bytes()
            .get(at + 1..at + 3)
            .is_none_or(|hex| !hex.iter().all(u8::is_ascii_hexdigit))
    });
    if malformed {
        return Err("the credentials contain a malformed %-escape");
    }
    percent_encoding::percent_decode_str(text)
        .decode_utf8()
        .map(String::from)
        .map_err(|_| "the credentials are not UTF-8 once decoded")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parsed(url: &str) -> (String, u16, Option<(Option<String>, String)>) {
        let endpoint = Endpoint::parse(url).unwrap_or_else(|reason| panic!("{url}: {reason}"));
        let auth = endpoint.auth.map(|auth| (auth.username, auth.password));
        (endpoint.host, endpoint.port, auth)
    }

    #[test]
    fn parses_host_port_and_database() {
        assert_eq!(parsed("redis://127.0.0.1:6380"), ("127.0.0.1".into(), 6380, None));
        assert_eq!(
            parsed("redis://localhost:6380/3"),
            ("localhost".into(), 6380, None)
        );
        assert_eq!(parsed("redis://redis"), ("redis".into(), 6379, None));
        assert_eq!(parsed("redis://redis/"), ("redis".into(), 6379, None));
        assert_eq!(
            parsed("redis://[::1]:7000/0?protocol=resp3"),
            ("::1".into(), 7000, None)
        );
    }

    #[test]
    fn parses_credentials() {
        assert_eq!(parsed("redis://:s%40cret@h:1").2, Some((None, "s@cret".into())));
        assert_eq!(
            parsed("redis://me:pw@h:1/2").2,
            Some((Some("me".into()), "pw".into()))
        );
        assert_eq!(parsed("redis://me@h:1").2, None);
    }

    #[test]
    fn rejects_what_it_cannot_ping() {
        for (url, reason) in [
            ("rediss://h:1", "only the redis:// scheme is supported"),
            ("http://h:1", "only the redis:// scheme is supported"),
            ("redis://:6379", "the host is missing"),
            ("redis://h:port", "the port is not a number in 1..=65535"),
            ("redis://h:0", "the port is not a number in 1..=65535"),
            (
                "redis://h:1/db",
                "the path after the port must be a database number",
            ),
            ("redis://[::1:1", "an IPv6 host is missing its closing ']'"),
            ("redis://:%zz@h:1", "the credentials contain a malformed %-escape"),
            ("redis://:%+1@h:1", "the credentials contain a malformed %-escape"),
            ("redis://:%4@h:1", "the credentials contain a malformed %-escape"),
        ] {
            assert_eq!(Endpoint::parse(url).err(), Some(reason), "{url}");
        }
    }

    #[test]
    fn reads_every_kind_of_reply() {
        let wire = "*5\r\n+OK\r\n-ERR no\r\n:-7\r\n$-1\r\n*2\r\n$5\r\na\r\nbc\r\n*-1\r\n";
        let reply = read_reply(&mut wire.as_bytes()).unwrap();
        assert_eq!(
            reply,
            Reply::Array(Some(vec![
                Reply::Simple("OK".into()),
                Reply::Error("ERR no".into()),
                Reply::Integer(-7),
                Reply::Bulk(None),
                Reply::Array(Some(vec![
                    Reply::Bulk(Some("a\r\nbc".into())),
                    Reply::Array(None)
                ])),
            ]))
        );
        assert_eq!(Reply::Simple("x".into()).text(), Some("x"));
        assert_eq!(Reply::Integer(1).text(), None);
        for bad in ["?x\r\n", "\r\n", ":x\r\n", "$3\r\nab"] {
            assert!(read_reply(&mut bad.as_bytes()).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn displays_ipv6_in_brackets() {
        assert_eq!(Endpoint::new("::1", 7000).to_string(), "[::1]:7000");
        assert_eq!(Endpoint::new("127.0.0.1", 7000).to_string(), "127.0.0.1:7000");
    }
}
