//! `ordo inspect CATEGORY KEY`: what a partition is stuck on, or what it
//! handles next.

use serde::Serialize;

use crate::cli::InspectArgs;
use crate::context::Context;
use crate::exit::{Failure, Verdict};
use crate::format;
use crate::view::{EntryView, HaltView, lane_name, pretty};

/// What `inspect` found (also the console's `/api/inspect`).
#[derive(Debug, Serialize)]
pub(crate) struct Inspected {
    category: String,
    key: String,
    group: String,
    halted: bool,
    /// The halt record, when halted.
    halt: Option<HaltView>,
    /// The halted head, else the entry the group handles next (`null`
    /// when it is caught up).
    head: Option<EntryView>,
    /// How many times Redis delivered the halted head (reads across owners).
    deliveries: Option<u64>,
    owner: Option<String>,
    generation: Option<u64>,
    lag: u64,
    pending: u64,
    lanes: Vec<&'static str>,
}

pub(crate) async fn run(ctx: &Context, args: &InspectArgs) -> Result<Verdict, Failure> {
    let (category, key) = (args.target.category.as_str(), args.target.key.as_str());
    let inspected = inspected(ctx, category, key, args.target.group.as_deref()).await?;
    if args.json {
        print!("{}", pretty(&inspected)?);
    } else {
        let now = ctx.status.server_time_ms().await?;
        print!("{}", render(&inspected, now)?);
    }
    Ok(Verdict::Ok)
}

/// Partition `category:key` for `group` (the category's only group when
/// `None`): its halt and head, or the entry it handles next.
pub(crate) async fn inspected(
    ctx: &Context,
    category: &str,
    key: &str,
    group: Option<&str>,
) -> Result<Inspected, Failure> {
    let group = ctx.resolve_group(category, key, group).await?;
    let (halt, head, deliveries) = match ctx.admin.inspect(&group, category, key).await {
        Ok(inspection) => (
            Some(HaltView::from(&inspection.halt)),
            inspection.head.as_ref().map(EntryView::from),
            inspection.deliveries,
        ),
        // A flowing key of a hashed partition shares its partition's
        // stream with other keys: its partition's status only.
        Err(ordo_redis::Error::NotHalted { .. }) if ctx.partition(category, key).id().is_hashed() => {
            (None, None, None)
        }
        Err(ordo_redis::Error::NotHalted { .. }) => {
            let next = ctx.status.next_entry(&group, category, key).await?;
            (None, next.as_ref().map(EntryView::from), None)
        }
        Err(error) => return Err(error.into()),
    };
    // The key's partition: its own, or the hashed one it is in.
    let member = ctx.partition(category, key).key().to_owned();
    let partition = ctx
        .status
        .partitions_of(category, &[member], std::slice::from_ref(&group))
        .await?
        .pop()
        .ok_or_else(|| anyhow::anyhow!("no status returned for partition `{category}:{key}`"))?;
    if partition.lanes.is_empty() && halt.is_none() {
        return Err(Failure::Usage(format!(
            "partition `{category}:{key}` does not exist: no stream, and not halted for group `{group}`"
        )));
    }
    let position = partition.groups.first();
    let inspected = Inspected {
        category: category.to_owned(),
        key: key.to_owned(),
        group,
        halted: halt.is_some(),
        halt,
        head,
        deliveries,
        owner: position
            .and_then(|p| p.owner.as_ref())
            .map(|o| o.instance.clone()),
        generation: position.and_then(|p| p.owner.as_ref()).map(|o| o.token),
        lag: position.map_or(0, |p| p.lag),
        pending: position.map_or(0, |p| p.pending),
        lanes: partition.lanes.iter().map(|l| lane_name(l.lane)).collect(),
    };
    Ok(inspected)
}

fn render(inspected: &Inspected, now_ms: u64) -> anyhow::Result<String> {
    let mut fields: Vec<(&str, String)> = vec![
        ("partition", format!("{}:{}", inspected.category, inspected.key)),
        ("group", inspected.group.clone()),
        (
            "owner",
            match (&inspected.owner, inspected.generation) {
                (Some(owner), Some(generation)) => format!("{owner} (generation {generation})"),
                _ => "none".to_owned(),
            },
        ),
        ("lanes", inspected.lanes.join(", ")),
        ("lag", format::count(inspected.lag)),
        ("pending", format::count(inspected.pending)),
    ];
    match &inspected.halt {
        Some(halt) => {
            fields.push((
                "state",
                format!(
                    "HALTED {} by {} after {}",
                    format::ago(now_ms, halt.halted_at_ms),
                    halt.owner,
                    format::plural(u64::from(halt.attempts), "attempt")
                ),
            ));
            fields.push(("error", halt.error.clone()));
            let delivered = inspected
                .deliveries
                .map(|n| format!(", read {} by owners", format::plural(n, "time")))
                .unwrap_or_default();
            fields.push(("head", format!("{} ({} lane){delivered}", halt.head, halt.lane)));
            if inspected.head.is_none() {
                fields.push((
                    "message",
                    "gone: the entry was deleted from its stream".to_owned(),
                ));
            }
        }
        None => {
            fields.push(("state", "flowing (not halted)".to_owned()));
            fields.push((
                "next",
                match &inspected.head {
                    Some(head) => format!("{} ({} lane)", head.id, head.lane),
                    None => "nothing: the group is caught up".to_owned(),
                },
            ));
        }
    }
    if let Some(type_name) = inspected.head.as_ref().and_then(|h| h.type_name.clone()) {
        fields.push(("type", type_name));
    }
    if let Some(envelope) = inspected.head.as_ref().and_then(|h| h.envelope.as_ref()) {
        fields.extend(lineage(envelope));
    }
    if let Some(unreadable) = inspected.head.as_ref().and_then(|h| h.unreadable.clone()) {
        fields.push(("unreadable", unreadable));
    }
    let width = fields.iter().map(|(label, _)| label.len()).max().unwrap_or(0);
    let mut out = String::new();
    for (label, value) in &fields {
        out.push_str(&format!("{label:<width$}  {}\n", format::text(value)));
    }
    if let Some(envelope) = inspected.head.as_ref().and_then(|h| h.envelope.as_ref()) {
        out.push_str("\nmessage (payload decoded):\n");
        for line in pretty(envelope)?.lines() {
            out.push_str(&format::text(line));
            out.push('\n');
        }
    }
    if let Some(halt) = &inspected.halt {
        let target = format!(
            "{} {} --group {} --expect-head {}",
            format::shell_word(&inspected.category),
            format::shell_word(&inspected.key),
            format::shell_word(&inspected.group),
            halt.head
        );
        let target = format::text(&target);
        out.push_str("\nto unstick it (refused if the head changes meanwhile):\n");
        out.push_str(&format!("  ordo skip  {target}   # acknowledge it unhandled\n"));
        out.push_str(&format!(
            "  ordo dlq   {target}   # move it to the dead-letter stream\n"
        ));
        out.push_str(&format!("  ordo retry {target}   # run it again\n"));
    }
    Ok(out)
}

/// When the head message happened and where it came from, as `inspect`
/// shows them: its `occurred_at`, its conversation (`correlation_id`, its
/// own id when it starts one) and the message whose handler raised it
/// (`causation_id`). Nothing for a field the envelope does not carry.
fn lineage(envelope: &serde_json::Value) -> Vec<(&'static str, String)> {
    let text = |field: &str| envelope.get(field).and_then(serde_json::Value::as_str);
    let mut fields = Vec::new();
    if let Some(millis) = envelope.get("occurred_at").and_then(serde_json::Value::as_u64) {
        let at = ordo_core::contract::message::Timestamp::from_unix_millis(millis);
        fields.push(("occurred", at.to_string()));
    }
    match (text("correlation_id"), text("id")) {
        (Some(correlation), _) => fields.push(("correlation", correlation.to_owned())),
        (None, Some(id)) => fields.push((
            "correlation",
            format!("{id} (its own id: it starts the conversation)"),
        )),
        (None, None) => {}
    }
    if let Some(causation) = text("causation_id") {
        fields.push(("causation", causation.to_owned()));
    }
    fields
}
