//! The Lua scripts that make each partition operation atomic, shipped to
//! Redis as one Redis Functions library, and the helpers that run them and
//! read their replies.
//!
//! Each script lives in `src/store/lua/*.lua` and is listed once, in
//! [`scripts!`]'s invocation below: that one line adds it to [`Scripts`]
//! and to the [`Library`]. The library (`#!lua name=ordo_<hash>`) holds
//! `common.lua` once, then every script as a function
//! `ordo_<hash>_<script>`, its body the script's text with `KEYS` and
//! `ARGV` its arguments. The hash is of the library's code, so a release
//! whose scripts changed loads a library of another name beside the old
//! one: a process of either version calls its own code.
//!
//! Why functions and not `EVALSHA`: a client that may `SCRIPT LOAD` (or
//! `EVAL`) can run any Lua, including a loop that blocks the whole server
//! (`SCRIPT KILL` is refused to an ACL user without it). Functions are
//! loaded by an administrator ([`ensure_loaded`], `ordo setup`); the
//! roles' ACL rules ([`crate::AclRole`]) grant `FCALL` only. Functions
//! persist in RDB/AOF and replicate, unlike the script cache.
//!
//! Flags: a script's `#!lua flags=...` first line becomes its function's
//! flags; a script without one gets `allow-cross-slot-keys`, which is what
//! `EVAL` allowed a script without flags (keys of other slots of its node).

use std::borrow::Cow;
use std::sync::LazyLock;

use fred::bytes_utils::Str;
use fred::interfaces::FunctionInterface;
use fred::types::Value;

use crate::error::{Error, Result};

/// One script: its name (for errors and logs), its source and the name of
/// the function that runs it.
#[derive(Debug)]
pub(crate) struct Script {
    name: &'static str,
    source: String,
    function: String,
}

/// Declares every script Ordo runs, one line each (`name: source,`): the
/// [`Scripts`] struct with a field per script, and [`SCRIPTS`], which
/// builds the [`Library`] of them all.
macro_rules! scripts {
    ($($name:ident: $source:expr,)*) => {
        /// Every script Ordo runs, and the library that ships them.
        #[derive(Debug)]
        pub(crate) struct Scripts {
            $(pub(crate) $name: Script,)*
            library: Library,
        }

        /// The scripts, shared by every client and runtime in the process.
        pub(crate) static SCRIPTS: LazyLock<Scripts> = LazyLock::new(|| {
            let mut scripts = Scripts {
                $($name: Script::new(stringify!($name), $source),)*
                library: Library::default(),
            };
            scripts.library = Library::new(&[$(&scripts.$name),*]);
            $(scripts.$name.function = scripts.library.function(stringify!($name));)*
            scripts
        });

        impl Scripts {
            /// Every script, in the order they are declared.
            #[cfg(test)]
            fn all(&self) -> Vec<&Script> {
                vec![$(&self.$name),*]
            }
        }
    };
}

scripts! {
    publish: include_str!("lua/publish.lua"),
    acquire: include_str!("lua/acquire.lua"),
    take: include_str!("lua/take.lua"),
    lost: include_str!("lua/lost.lua"),
    arm: include_str!("lua/arm.lua"),
    recheck: include_str!("lua/recheck.lua"),
    union: include_str!("lua/union.lua"),
    release: include_str!("lua/release.lua"),
    read: include_str!("lua/read.lua"),
    read_hashed: include_str!("lua/read_hashed.lua"),
    park: include_str!("lua/park.lua"),
    hold: include_str!("lua/hold.lua"),
    held: include_str!("lua/held.lua"),
    ack_held: include_str!("lua/ack_held.lua"),
    resolve_parked: include_str!("lua/resolve_parked.lua"),
    ack: include_str!("lua/ack.lua"),
    halt: include_str!("lua/halt.lua"),
    close: include_str!("lua/close.lua"),
    reap: include_str!("lua/reap.lua"),
    resolve: include_str!("lua/resolve.lua"),
    commit: commit_source(),
    announce: include_str!("lua/announce.lua"),
    pause: include_str!("lua/pause.lua"),
    ack_plain: include_str!("lua/ack_plain.lua"),
    claim_plain: include_str!("lua/claim_plain.lua"),
    carry_positions: include_str!("lua/carry_positions.lua"),
}

/// The helpers every script may use, defined once at the top of the
/// library.
const COMMON: &str = include_str!("lua/common.lua");

/// The flags of a script without a `#!lua flags=` line.
const DEFAULT_FLAGS: &[&str] = &["allow-cross-slot-keys"];

/// The Redis Functions library of every script (see the module docs).
#[derive(Debug, Default)]
pub(crate) struct Library {
    name: String,
    source: String,
}

impl Library {
    /// The library of `scripts`.
    fn new(scripts: &[&Script]) -> Self {
        let mut body = String::new();
        body.push_str(COMMON);
        let mut functions = Vec::with_capacity(scripts.len());
        for script in scripts {
            let (flags, code) = split_flags(&script.source);
            functions.push((script.name, flags, code));
        }
        // The name hashes everything that makes up the library but the
        // names it derives from it.
        let mut hashed = body.clone();
        for (name, flags, code) in &functions {
            hashed.push_str(&format!("\n-- {name} {flags:?}\n{code}"));
        }
        let name = format!("ordo_{}", &fred::util::sha1_hash(&hashed)[..12]);
        let mut source = format!("#!lua name={name}\n{body}");
        for (script, flags, code) in &functions {
            let flags: Vec<String> = flags.iter().map(|flag| format!("'{flag}'")).collect();
            source.push_str(&format!(
                "\nredis.register_function{{function_name = '{name}_{script}', flags = {{{}}}, \
                 callback = function(KEYS, ARGV)\n{code}\nend}}\n",
                flags.join(", ")
            ));
        }
        source.push_str(&format!(
            "\n-- Answers with the library's name: how a client checks that the library is loaded.\n\
             redis.register_function{{function_name = '{name}_{LOADED}', flags = {{'no-writes'}}, \
             callback = function() return '{name}' end}}\n"
        ));
        Self { name, source }
    }

    /// The library's name, `ordo_<hash>`.
    pub(crate) fn name(&self) -> &str {
        &self.name
    }

    /// The library's code, for `FUNCTION LOAD`.
    pub(crate) fn source(&self) -> &str {
        &self.source
    }

    /// The name of the function of script (or helper) `script`.
    fn function(&self, script: &str) -> String {
        format!("{}_{script}", self.name)
    }
}

/// The helper function of the library that answers with its name.
const LOADED: &str = "loaded";

/// A script's flags (from its `#!lua flags=a,b` first line, else
/// [`DEFAULT_FLAGS`]) and its code without that line.
fn split_flags(source: &str) -> (Vec<&str>, &str) {
    match source.split_once('\n') {
        Some((first, rest)) if first.starts_with("#!lua") => {
            let flags = first
                .split_whitespace()
                .find_map(|word| word.strip_prefix("flags="))
                .map(|flags| flags.split(',').filter(|flag| !flag.is_empty()).collect())
                .unwrap_or_default();
            (flags, rest)
        }
        _ => (DEFAULT_FLAGS.to_vec(), source),
    }
}

/// The commands a fenced commit may run (writes to plain data structures;
/// no blocking, scripting or administrative commands). The only list:
/// `commit.lua` gets it written in when the script is built.
pub(crate) const ALLOWED: &[&str] = &[
    "SET", "DEL", "UNLINK", "EXPIRE", "PEXPIRE", "PERSIST", "INCR", "INCRBY", "DECR", "DECRBY", "APPEND",
    "HSET", "HDEL", "HINCRBY", "SADD", "SREM", "ZADD", "ZREM", "ZINCRBY", "RPUSH", "LPUSH", "LTRIM", "XADD",
    "XTRIM",
];

/// The placeholder in `commit.lua` for the allowed commands.
const ALLOWED_PLACEHOLDER: &str = "{--[[ALLOWED]]}";

/// `commit.lua` with the allowed commands of [`ALLOWED`]
/// written in as a Lua set.
fn commit_source() -> String {
    let set: Vec<String> = ALLOWED
        .iter()
        .map(|command| format!("{command} = true"))
        .collect();
    include_str!("lua/commit.lua").replace(ALLOWED_PLACEHOLDER, &format!("{{{}}}", set.join(", ")))
}

/// The library every script runs in.
pub(crate) fn library() -> &'static Library {
    &SCRIPTS.library
}

/// Whether `error` is Redis's reply to a call of a function it does not
/// have (the library was never loaded, or was lost: a restart without
/// persistence, a node added to a cluster).
fn is_missing_function(error: &fred::error::Error) -> bool {
    error.details().starts_with("ERR Function not found")
}

/// Loads the [`library`] on every primary that lacks it (a cluster's every
/// primary; `FUNCTION LOAD REPLACE` of the same code is a no-op where it is
/// loaded already). Refused when the client's ACL user may not load code
/// (`FUNCTION LOAD`): then [`Error::LibraryNotLoaded`], naming `ordo setup`.
pub(crate) async fn load<C: FunctionInterface + Send + Sync>(client: &C) -> Result<()> {
    let library = library();
    match client
        .function_load_cluster::<Value, _>(true, library.source())
        .await
    {
        Ok(_) => {
            tracing::info!(
                event = ordo_core::contract::log_events::REDIS_LIBRARY_LOADED,
                library = library.name(),
                "loaded Ordo's function library into Redis"
            );
            Ok(())
        }
        Err(error) if error.details().starts_with("NOPERM") => Err(Error::LibraryNotLoaded {
            library: library.name().to_owned(),
            source: error,
        }),
        Err(error) => Err(error.into()),
    }
}

/// Makes sure the [`library`] is loaded on every primary of `client`'s
/// Redis: one `FCALL_RO` of its `loaded` function per primary, and
/// [`load`] where it is missing. Returns whether it had to be loaded.
pub(crate) async fn ensure_loaded(client: &fred::clients::Client) -> Result<bool> {
    let function = library().function(LOADED);
    let replies = crate::net::nodes::on_every_node(client, |_, node| {
        let function = function.clone();
        async move {
            match node
                .fcall_ro::<Value, _, _, _>(function, Vec::<String>::new(), Vec::<Value>::new())
                .await
            {
                Ok(_) => Ok(true),
                Err(error) if is_missing_function(&error) => Ok(false),
                Err(error) => Err(error.into()),
            }
        }
    })
    .await?;
    if replies.iter().all(|(_, loaded)| *loaded) {
        return Ok(false);
    }
    load(client).await?;
    Ok(true)
}

impl Script {
    fn new(name: &'static str, source: impl Into<String>) -> Self {
        Self {
            name,
            source: source.into(),
            function: String::new(),
        }
    }

    /// The script's name, for errors and logs.
    pub(crate) fn name(&self) -> &'static str {
        self.name
    }

    /// Runs the script's function with `FCALL`; when the server does not
    /// have it (never loaded, or lost with a restart without persistence or
    /// on a node added to a cluster) loads the library, on every primary,
    /// and calls it again. Loading needs an ACL user that may: otherwise
    /// [`Error::LibraryNotLoaded`].
    pub(crate) async fn run<C>(&self, client: &C, keys: Vec<String>, args: Vec<Value>) -> Result<Value>
    where
        C: FunctionInterface + Send + Sync,
    {
        self.run_with(client, || (keys.clone(), args.clone())).await
    }

    /// [`Script::run`] for a call on the hot path: `call` makes its keys
    /// and arguments, a second time only when the library had to be loaded
    /// (instead of a copy of them kept for that case on every call).
    pub(crate) async fn run_with<C, F>(&self, client: &C, call: F) -> Result<Value>
    where
        C: FunctionInterface + Send + Sync,
        F: Fn() -> (Vec<String>, Vec<Value>),
    {
        let (keys, args) = call();
        match client
            .fcall::<Value, _, _, _>(self.function.as_str(), keys, args)
            .await
        {
            Err(error) if is_missing_function(&error) => {
                load(client).await?;
                let (keys, args) = call();
                Ok(client.fcall(self.function.as_str(), keys, args).await?)
            }
            result => Ok(result?),
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use fred::interfaces::{ClientLike, FunctionInterface};
    use fred::prelude::Builder;
    use ordo_testkit::Redis;

    use super::*;

    #[test]
    fn every_script_is_one_function_of_the_library_with_its_flags() {
        let library = library();
        let source = library.source();
        assert!(
            library.name().starts_with("ordo_") && library.name().len() == 17,
            "{}",
            library.name()
        );
        assert!(source.starts_with(&format!("#!lua name={}\n", library.name())));
        assert_eq!(
            source.matches("#!lua").count(),
            1,
            "only the library's header line"
        );
        assert_eq!(
            source.matches("local function parse_id").count(),
            1,
            "common.lua once"
        );
        for script in SCRIPTS.all() {
            assert_eq!(script.function, format!("{}_{}", library.name(), script.name()));
            let registered = format!("function_name = '{}',", script.function);
            assert_eq!(source.matches(&registered).count(), 1, "{registered}");
        }
        let flags = |script: &Script| {
            let at = source
                .find(&format!("function_name = '{}',", script.function))
                .unwrap();
            let line = &source[at..source[at..].find('\n').unwrap() + at];
            line[line.find("flags = {").unwrap()..line.find('}').unwrap() + 1].to_owned()
        };
        assert_eq!(
            flags(&SCRIPTS.union),
            "flags = {'allow-cross-slot-keys', 'no-writes'}"
        );
        assert_eq!(flags(&SCRIPTS.publish), "flags = {'allow-cross-slot-keys'}");
        assert_eq!(
            flags(&SCRIPTS.release),
            "flags = {'allow-cross-slot-keys'}",
            "as EVAL without flags"
        );
    }

    #[test]
    fn flags_come_from_the_shebang_line_only() {
        assert_eq!(
            split_flags("#!lua flags=a,b\nreturn 1"),
            (vec!["a", "b"], "return 1")
        );
        assert_eq!(split_flags("#!lua\nreturn 1"), (vec![], "return 1"));
        assert_eq!(split_flags("return 1\n"), (DEFAULT_FLAGS.to_vec(), "return 1\n"));
    }

    #[test]
    fn the_commit_script_allows_exactly_the_rust_list() {
        let source = commit_source();
        assert!(
            !source.contains(ALLOWED_PLACEHOLDER),
            "the placeholder is replaced"
        );
        let line = source
            .lines()
            .find(|line| line.starts_with("local allowed = {"))
            .expect("commit.lua defines `allowed`");
        let listed: Vec<&str> = line
            .trim_start_matches("local allowed = {")
            .trim_end_matches('}')
            .split(", ")
            .map(|entry| entry.trim_end_matches(" = true"))
            .collect();
        assert_eq!(listed, ALLOWED);
    }

    /// A client of the Redis at `url`, connected.
    pub(crate) async fn connect(url: &str) -> fred::clients::Client {
        let client = Builder::from_config(crate::net::connection::client_config(url).unwrap())
            .build()
            .unwrap();
        client.init().await.unwrap();
        client
    }

    /// Redis accepts the library; a client that may load it does so once,
    /// when it is missing; one that may not gets an error naming the
    /// library and `ordo setup`, and runs nothing.
    #[tokio::test]
    async fn the_library_is_loaded_by_a_user_that_may_and_named_to_one_that_may_not() {
        let redis = Redis::start_local().unwrap();
        redis
            .create_user_with_rules(
                "caller",
                "pw",
                &["-@all", "+fcall", "+fcall_ro", "+get", "+del", "~*"],
            )
            .unwrap();
        let address = redis.url().trim_start_matches("redis://").to_owned();
        let caller = connect(&format!("redis://caller:pw@{address}")).await;
        let error = ensure_loaded(&caller).await.unwrap_err();
        assert!(matches!(error, Error::LibraryNotLoaded { .. }), "{error:?}");
        let text = error.to_string();
        assert!(
            text.contains(library().name()) && text.contains("ordo setup"),
            "{text}"
        );
        let error = SCRIPTS
            .release
            .run(&caller, vec!["k".to_owned()], vec!["v".into()])
            .await
            .unwrap_err();
        assert!(matches!(error, Error::LibraryNotLoaded { .. }), "{error:?}");

        let admin = connect(&redis.url()).await;
        assert!(ensure_loaded(&admin).await.unwrap(), "loaded when missing");
        assert!(!ensure_loaded(&admin).await.unwrap(), "and only then");
        assert!(!ensure_loaded(&caller).await.unwrap());
        let listed: Value = admin.function_list(Some(library().name()), false).await.unwrap();
        let functions = format!("{listed:?}");
        for script in SCRIPTS.all() {
            assert!(
                functions.contains(&format!("\"{}\"", script.function)),
                "{} in {functions}",
                script.function
            );
        }
        let released = SCRIPTS
            .release
            .run(&caller, vec!["k".to_owned()], vec!["v".into()])
            .await
            .unwrap();
        assert_eq!(released.as_i64(), Some(0));
        let _ = caller.quit().await;
        let _ = admin.quit().await;
    }
}

/// A script reply of the form `{tag, rest...}`.
#[derive(Debug)]
pub(crate) struct Reply {
    context: &'static str,
    tag: String,
    rest: Vec<Value>,
}

impl Reply {
    /// Splits `value`, the reply of `script`, into its tag and the rest.
    pub(crate) fn parse(script: &Script, value: Value) -> Result<Self> {
        let context = script.name();
        let mut items = array(value).into_iter();
        let tag = items
            .next()
            .and_then(|v| v.as_str().map(|s| s.into_owned()))
            .ok_or_else(|| Error::protocol(context, "reply has no tag"))?;
        Ok(Self {
            context,
            tag,
            rest: items.collect(),
        })
    }

    /// The tag (`ok`, `fenced`, ...).
    pub(crate) fn tag(&self) -> &str {
        &self.tag
    }

    /// Turns a `{'fenced', holder}` reply into [`Error::Fenced`]; passes
    /// any other reply through.
    pub(crate) fn unfenced(self, lease: &str, expected: &str) -> Result<Self> {
        if self.tag != "fenced" {
            return Ok(self);
        }
        let holder = self.string(0).ok().filter(|h| !h.is_empty());
        Err(Error::Fenced {
            lease: lease.to_owned(),
            expected: expected.to_owned(),
            holder,
        })
    }

    /// The `index`-th value after the tag, as text.
    pub(crate) fn string(&self, index: usize) -> Result<String> {
        self.rest
            .get(index)
            .and_then(|v| v.as_str().map(|s| s.into_owned()))
            .ok_or_else(|| self.unexpected(format!("field {index} is not text")))
    }

    /// The `index`-th value after the tag, as an integer.
    pub(crate) fn integer(&self, index: usize) -> Result<i64> {
        self.rest
            .get(index)
            .and_then(Value::as_i64)
            .ok_or_else(|| self.unexpected(format!("field {index} is not an integer")))
    }

    /// Takes the `index`-th value after the tag.
    pub(crate) fn take(&mut self, index: usize) -> Result<Value> {
        if index >= self.rest.len() {
            return Err(self.unexpected(format!("field {index} is missing")));
        }
        Ok(std::mem::replace(&mut self.rest[index], Value::Null))
    }

    /// Every value after the tag.
    pub(crate) fn into_rest(self) -> Vec<Value> {
        self.rest
    }

    /// An error for a reply this caller did not expect.
    pub(crate) fn unexpected(&self, detail: impl Into<String>) -> Error {
        Error::protocol(self.context, format!("{} (tag `{}`)", detail.into(), self.tag))
    }
}

/// The fields of an entry Ordo reads (and writes again elsewhere when it
/// moves the entry: parking, holding, dead-lettering).
pub(crate) const ENTRY_FIELDS: [&str; 3] = ["type", "key", "envelope"];

/// A stream entry as Redis holds it: its id and field/value pairs. Stream
/// content is untrusted (anyone with `XADD` on the stream writes it): a
/// value that is not UTF-8 text is kept as bytes in `binary`, for the
/// entry alone to be found unreadable, never the read it came with.
///
/// Its text shares the reply's buffer, not a copy of it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct RawEntry {
    pub(crate) id: Str,
    /// The fields whose value is text (the names Ordo reads are not
    /// allocated).
    pub(crate) fields: Vec<(Cow<'static, str>, Str)>,
    /// The fields whose value is not UTF-8 text, as they are. (A field
    /// whose name is not text cannot be one Ordo reads, and is left out.)
    pub(crate) binary: Vec<(String, Vec<u8>)>,
}

impl RawEntry {
    /// The value of `field`, when it is text.
    pub(crate) fn field(&self, field: &str) -> Option<&str> {
        self.fields.iter().find(|(f, _)| f == field).map(|(_, v)| &**v)
    }

    /// Moves the value of `field` out, when it is text (the first of that
    /// name, as [`RawEntry::field`] reads it), instead of copying it.
    pub(crate) fn take_field(&mut self, field: &str) -> Option<Str> {
        let (_, value) = self.fields.iter_mut().find(|(f, _)| f == field)?;
        Some(std::mem::take(value))
    }

    /// Moves the value of `field` out, when it is not text.
    pub(crate) fn take_binary(&mut self, field: &str) -> Option<Vec<u8>> {
        let (_, value) = self.binary.iter_mut().find(|(f, _)| f == field)?;
        Some(std::mem::take(value))
    }
}

/// Parses `{{id, {field, value, ...}}, ...}` (an XRANGE/XREADGROUP entry
/// list). Only the shape of the reply can fail it (an entry without an
/// id): whatever the entries' fields hold, each entry is parsed on its own.
pub(crate) fn parse_entries(context: &'static str, value: Value) -> Result<Vec<RawEntry>> {
    array(value)
        .into_iter()
        .map(|entry| parse_entry(context, entry))
        .collect()
}

fn parse_entry(context: &'static str, entry: Value) -> Result<RawEntry> {
    let mut parts = array(entry).into_iter();
    let id = parts
        .next()
        .and_then(|v| text(v).ok())
        .ok_or_else(|| Error::protocol(context, "stream entry has no id"))?;
    let flat = parts.next().map(array).unwrap_or_default();
    let mut fields = Vec::with_capacity(flat.len() / 2);
    let mut binary = Vec::new();
    let mut flat = flat.into_iter();
    while let (Some(name), Some(value)) = (flat.next(), flat.next()) {
        let Some(name) = name.as_str() else { continue };
        let name = match ENTRY_FIELDS.iter().find(|&&field| field == name) {
            Some(&field) => Cow::Borrowed(field),
            None => Cow::Owned(name.into_owned()),
        };
        match text(value) {
            Ok(value) => fields.push((name, value)),
            Err(value) => binary.push((
                name.into_owned(),
                value.as_bytes().map(<[u8]>::to_vec).unwrap_or_default(),
            )),
        }
    }
    Ok(RawEntry { id, fields, binary })
}

/// The text of `value`, sharing the reply's buffer where fred keeps it as
/// one (a bulk string); `Err` with the value when it is not text.
fn text(value: Value) -> std::result::Result<Str, Value> {
    match value {
        Value::String(text) => Ok(text),
        Value::Bytes(bytes) => Str::from_inner(bytes).map_err(|error| Value::Bytes(error.into_inner())),
        other => match other.as_str() {
            Some(text) => Ok(Str::from(&*text)),
            None => Err(other),
        },
    }
}

/// The items of an array reply; nil (an empty Lua table or `false`) is empty.
pub(crate) fn array(value: Value) -> Vec<Value> {
    match value {
        Value::Null => Vec::new(),
        other => other.into_array(),
    }
}
