//! The Lua scripts that make each partition operation atomic, and the
//! helpers that run them and read their replies.
//!
//! Each script lives in `src/lua/*.lua`; those that need the shared helpers
//! get `common.lua` prepended at compile time.

use std::sync::LazyLock;

use fred::interfaces::LuaInterface;
use fred::types::Value;

use crate::error::{Error, Result};

macro_rules! with_common {
    ($file:literal) => {
        with_common(include_str!($file))
    };
}

/// `common.lua` prepended to the script `body`, after its first line when
/// that is a `#!lua` line (Redis reads a script's flags from its first line
/// only).
fn with_common(body: &str) -> String {
    const COMMON: &str = include_str!("lua/common.lua");
    match body.split_once('\n') {
        Some((shebang, rest)) if shebang.starts_with("#!") => format!("{shebang}\n{COMMON}{rest}"),
        _ => format!("{COMMON}{body}"),
    }
}

/// One script: fred's [`Script`](fred::types::scripts::Script) (its source
/// and SHA-1) and a name for errors and logs.
#[derive(Debug)]
pub(crate) struct Script {
    name: &'static str,
    script: fred::types::scripts::Script,
}

/// Every script Ordo runs.
#[derive(Debug)]
pub(crate) struct Scripts {
    pub(crate) publish: Script,
    pub(crate) acquire: Script,
    pub(crate) renew: Script,
    pub(crate) arm: Script,
    pub(crate) union: Script,
    pub(crate) release: Script,
    pub(crate) read: Script,
    pub(crate) read_hashed: Script,
    pub(crate) refill: Script,
    pub(crate) park: Script,
    pub(crate) hold: Script,
    pub(crate) held: Script,
    pub(crate) ack_held: Script,
    pub(crate) resolve_parked: Script,
    pub(crate) ack: Script,
    pub(crate) halt: Script,
    pub(crate) close: Script,
    pub(crate) reap: Script,
    pub(crate) resolve: Script,
    pub(crate) commit: Script,
    pub(crate) announce: Script,
    pub(crate) pause: Script,
    pub(crate) ack_plain: Script,
    pub(crate) claim_plain: Script,
}

/// The scripts, shared by every client and runtime in the process.
pub(crate) static SCRIPTS: LazyLock<Scripts> = LazyLock::new(|| Scripts {
    publish: Script::new("publish", with_common!("lua/publish.lua")),
    acquire: Script::new("acquire", include_str!("lua/acquire.lua")),
    renew: Script::new("renew", include_str!("lua/renew.lua")),
    arm: Script::new("arm", include_str!("lua/arm.lua")),
    union: Script::new("union", include_str!("lua/union.lua")),
    release: Script::new("release", include_str!("lua/release.lua")),
    read: Script::new("read", with_common!("lua/read.lua")),
    read_hashed: Script::new("read_hashed", with_common!("lua/read_hashed.lua")),
    refill: Script::new("refill", with_common!("lua/refill.lua")),
    park: Script::new("park", with_common!("lua/park.lua")),
    hold: Script::new("hold", with_common!("lua/hold.lua")),
    held: Script::new("held", with_common!("lua/held.lua")),
    ack_held: Script::new("ack_held", with_common!("lua/ack_held.lua")),
    resolve_parked: Script::new("resolve_parked", include_str!("lua/resolve_parked.lua")),
    ack: Script::new("ack", with_common!("lua/ack.lua")),
    halt: Script::new("halt", with_common!("lua/halt.lua")),
    close: Script::new("close", with_common!("lua/close.lua")),
    reap: Script::new("reap", with_common!("lua/reap.lua")),
    resolve: Script::new("resolve", with_common!("lua/resolve.lua")),
    commit: Script::new("commit", commit_source()),
    announce: Script::new("announce", with_common!("lua/announce.lua")),
    pause: Script::new("pause", with_common!("lua/pause.lua")),
    ack_plain: Script::new("ack_plain", with_common!("lua/ack_plain.lua")),
    claim_plain: Script::new("claim_plain", with_common!("lua/claim_plain.lua")),
});

/// The placeholder in `commit.lua` for the allowed commands.
const ALLOWED_PLACEHOLDER: &str = "{--[[ALLOWED]]}";

/// `commit.lua` with the allowed commands of [`crate::fence::ALLOWED`]
/// written in as a Lua set.
fn commit_source() -> String {
    let set: Vec<String> = crate::fence::ALLOWED
        .iter()
        .map(|command| format!("{command} = true"))
        .collect();
    with_common!("lua/commit.lua").replace(ALLOWED_PLACEHOLDER, &format!("{{{}}}", set.join(", ")))
}

impl Script {
    fn new(name: &'static str, source: impl Into<String>) -> Self {
        Self {
            name,
            script: fred::types::scripts::Script::from_lua(source.into()),
        }
    }

    /// The script's name, for errors and logs.
    pub(crate) fn name(&self) -> &'static str {
        self.name
    }

    /// Runs the script with `EVALSHA`; when the server does not know it
    /// (first use, or a restart or failover emptied the script cache) loads
    /// it, on every primary of a cluster, and runs it again. The same as
    /// fred's `evalsha_with_reload`, for any client kind (a pool, a client).
    pub(crate) async fn run<C>(&self, client: &C, keys: Vec<String>, args: Vec<Value>) -> Result<Value>
    where
        C: LuaInterface + Send + Sync,
    {
        match self
            .script
            .evalsha::<Value, _, _, _>(client, keys.clone(), args.clone())
            .await
        {
            Err(error) if error.details().starts_with("NOSCRIPT") => {
                let source = self.script.lua().cloned().unwrap_or_default();
                let _: Value = client.script_load_cluster(source).await?;
                Ok(self.script.evalsha(client, keys, args).await?)
            }
            result => Ok(result?),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_shebang_stays_the_first_line_of_a_script_with_the_common_helpers() {
        let publish = with_common!("lua/publish.lua");
        assert!(publish.starts_with("#!lua flags=allow-cross-slot-keys\n"));
        assert!(publish.contains("local function create_group"));
        assert_eq!(publish.matches("#!lua").count(), 1);
        let plain = with_common("return 1\n");
        assert_eq!(plain, concat!(include_str!("lua/common.lua"), "return 1\n"));
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
        assert_eq!(listed, crate::fence::ALLOWED);
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

/// A stream entry as Ordo writes it: its id and field/value pairs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct RawEntry {
    pub(crate) id: String,
    pub(crate) fields: Vec<(String, String)>,
}

impl RawEntry {
    /// The value of `field`.
    pub(crate) fn field(&self, field: &str) -> Option<&str> {
        self.fields
            .iter()
            .find(|(f, _)| f == field)
            .map(|(_, v)| v.as_str())
    }
}

/// Parses `{{id, {field, value, ...}}, ...}` (an XRANGE/XREADGROUP entry list).
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
        .and_then(|v| v.as_str().map(|s| s.into_owned()))
        .ok_or_else(|| Error::protocol(context, "stream entry has no id"))?;
    let flat = parts.next().map(array).unwrap_or_default();
    let mut fields = Vec::with_capacity(flat.len() / 2);
    let mut flat = flat.into_iter();
    while let (Some(name), Some(value)) = (flat.next(), flat.next()) {
        let (Some(name), Some(value)) = (name.as_str(), value.as_str()) else {
            return Err(Error::protocol(
                context,
                format!("entry {id} has a non-text field"),
            ));
        };
        fields.push((name.into_owned(), value.into_owned()));
    }
    Ok(RawEntry { id, fields })
}

/// The items of an array reply; nil (an empty Lua table or `false`) is empty.
pub(crate) fn array(value: Value) -> Vec<Value> {
    match value {
        Value::Null => Vec::new(),
        other => other.into_array(),
    }
}
