//! `ordo status`: the whole cluster on one screen.

use std::collections::BTreeMap;

use ordo_core::contract::health::{HealthState, SubscriptionHealth};
use ordo_redis::SecretUrl;

use crate::cli::StatusArgs;
use crate::context::Context;
use crate::exit::{Failure, Verdict};
use crate::format;
use crate::table::{Align, Table};
use crate::view::{CategoryView, GroupView, HaltView, InstanceView, OutboxView, Snapshot, pretty};

/// Errors are cut to this many characters in tables (`inspect` shows them whole).
const ERROR_WIDTH: usize = 60;
/// How long `--database-url` may take to connect.
const OUTBOX_CONNECT_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);

pub(crate) async fn run(ctx: &Context, args: &StatusArgs) -> Result<Verdict, Failure> {
    for category in &args.categories {
        ctx.ensure_category(category).await?;
    }
    let threshold = args.warn_partitions.unwrap_or(ctx.settings.warn_partitions);
    let mut snapshot = snapshot(ctx, &args.categories, threshold).await?;
    let database_url = match (&args.database_url, &args.database_url_file) {
        (Some(url), _) => Some(url.clone()),
        (None, Some(path)) => Some(crate::settings::read_url_file(path, "--database-url-file")?),
        (None, None) => None,
    };
    if let Some(url) = &database_url {
        let outbox = outbox_view(url, &args.outbox_schema).await?;
        if outbox.abandoned > 0 {
            snapshot.warnings.push(format!(
                "the PostgreSQL outbox ({}) has {} abandoned rows (invalid keys, unreadable rows); inspect them in {}.outbox where status = 2",
                outbox.schema, outbox.abandoned, outbox.schema
            ));
        }
        if outbox.refused > 0 {
            snapshot.warnings.push(format!(
                "the PostgreSQL outbox ({}) has {} keys waiting behind a row Redis refused ({} of them hold \
                 positions Redis has from another history of the database: run `ordo-pg-relay adopt`, see \
                 docs/POSTGRES.md); the reason is the refused row's last_error",
                outbox.schema, outbox.refused, outbox.conflicts
            ));
        }
        snapshot.outbox = Some(outbox);
    }
    if args.json {
        print!("{}", pretty(&snapshot)?);
    } else {
        print!("{}", render(&snapshot, &ctx.settings.redis_url));
        if let Some(outbox) = &snapshot.outbox {
            println!(
                "\nPostgreSQL outbox `{}`: {} pending (oldest {}), {} abandoned; {} live relays leasing {} of 64 slots",
                outbox.schema,
                outbox.pending,
                format::duration(std::time::Duration::from_millis(outbox.oldest_pending_age_ms)),
                outbox.abandoned,
                outbox.live_relays,
                outbox.leased_slots
            );
        }
    }
    Ok(if !args.check {
        Verdict::Ok
    } else if !snapshot.halted.is_empty() {
        Verdict::Halted
    } else if !snapshot.warnings.is_empty() {
        Verdict::Warning
    } else {
        Verdict::Ok
    })
}

/// The PostgreSQL outbox in `schema` of the database at `url`.
async fn outbox_view(url: &SecretUrl, schema: &str) -> Result<OutboxView, Failure> {
    use anyhow::Context as _;
    let pool = ordo_postgres::sqlx::postgres::PgPoolOptions::new()
        .max_connections(1)
        // An operator waiting on an unreachable database wants the error, not 30 s of retries.
        .acquire_timeout(OUTBOX_CONNECT_TIMEOUT)
        .connect(url.expose())
        .await
        // `url` shows itself with its password masked.
        .with_context(|| format!("cannot connect to the PostgreSQL outbox database at {url}"))?;
    let outbox = ordo_postgres::PgOutbox::builder(pool.clone())
        .schema(schema)
        .build()
        .map_err(|e| Failure::Usage(e.to_string()))?;
    let status = ordo_postgres::OutboxStatusReport::read(&outbox)
        .await
        .with_context(|| {
            format!("cannot read the PostgreSQL outbox in schema `{schema}` (is it migrated?)")
        })?;
    pool.close().await;
    Ok(OutboxView {
        schema: schema.to_owned(),
        pending: status.pending,
        oldest_pending_age_ms: u64::try_from(status.oldest_pending_age.as_millis()).unwrap_or(u64::MAX),
        abandoned: status.abandoned,
        live_relays: status.live_relays,
        leased_slots: status.leased_slots,
        refused: status.refused,
        conflicts: status.conflicts,
    })
}

/// The state of `only` (every category found when empty), with warnings
/// for categories over `threshold` live partitions.
pub(crate) async fn snapshot(ctx: &Context, only: &[String], threshold: u64) -> Result<Snapshot, Failure> {
    let server_time_ms = ctx.status.server_time_ms().await?;
    let categories = if only.is_empty() {
        ctx.status.categories().await?
    } else {
        only.to_vec()
    };
    // Every partition is read once, for the tables and the health alike.
    let mut read = Vec::with_capacity(categories.len());
    for category in &categories {
        read.push(Read::of(ctx, category).await?);
    }
    let mut views = Vec::with_capacity(categories.len());
    let mut warnings = Vec::new();
    for read in &read {
        let view = category_view(ctx, read).await?;
        warnings.extend(warnings_of(&view, threshold));
        views.push(view);
    }
    let health = health(ctx, &read).await?;
    for group in &health {
        // A pause (its own warning, below) sorts above a lag.
        let paused = ctx.status.paused(&group.handler).await?;
        if matches!(group.state, HealthState::Lagging | HealthState::Paused) {
            let lag: Vec<&str> = group
                .reasons
                .iter()
                .map(String::as_str)
                .filter(|reason| !reason.starts_with("paused on instance"))
                .collect();
            if !lag.is_empty() {
                warnings.push(format!(
                    "consumer group `{}` is lagging: {}",
                    group.handler,
                    lag.join("; ")
                ));
            }
        }
        for pause in &paused {
            warnings.push(format!(
                "handler `{}` is {}; it starts one probe message at a time and resumes by itself \
                 once a probe gets an answer (a dependency looks down: check it)",
                group.handler,
                pause.describe(server_time_ms)
            ));
        }
    }
    let mut halts = Vec::new();
    for category in &categories {
        halts.extend(ctx.admin.halted_in(category).await?);
    }
    halts.sort_by(|a, b| (&a.group, &a.category, &a.key).cmp(&(&b.group, &b.category, &b.key)));
    let halted = halts.iter().map(HaltView::from).collect();
    Ok(Snapshot {
        server_time_ms,
        warn_partitions: threshold,
        categories: views,
        halted,
        health,
        warnings,
        outbox: None,
    })
}

/// One category as read from Redis: its groups, and its partitions with
/// every group's position (`None` when it has none: its base stream).
struct Read {
    category: String,
    groups: Vec<String>,
    partitions: Option<Vec<ordo_redis::PartitionStatus>>,
}

impl Read {
    async fn of(ctx: &Context, category: &str) -> Result<Self, Failure> {
        let groups = ctx.status.groups(category).await?;
        let keys = ctx.status.partition_keys(category).await?;
        let partitions = if keys.is_empty() {
            None
        } else {
            Some(ctx.status.positions_of(category, &keys, &groups).await?)
        };
        Ok(Self {
            category: category.to_owned(),
            groups,
            partitions,
        })
    }
}

/// A category a group consumes, and its partitions as read (`None`: not
/// partitioned).
type Consumed<'a> = (&'a str, Option<&'a [ordo_redis::PartitionStatus]>);

/// The health of every consumer group of the categories `read`, over the
/// categories it consumes, judged by the function the Redis broker's
/// `RunningDomain::health()` uses, with the `[health]` thresholds.
async fn health(ctx: &Context, read: &[Read]) -> Result<Vec<SubscriptionHealth>, Failure> {
    let mut consumed: BTreeMap<&str, Vec<Consumed<'_>>> = BTreeMap::new();
    for category in read {
        for group in &category.groups {
            consumed
                .entry(group.as_str())
                .or_default()
                .push((category.category.as_str(), category.partitions.as_deref()));
        }
    }
    let thresholds = ctx.settings.config.health();
    let mut health = Vec::with_capacity(consumed.len());
    for (group, categories) in &consumed {
        health.push(ordo_redis::health::group_health_of(&ctx.status, group, categories, thresholds).await?);
    }
    Ok(health)
}

/// One category: its partitions summed per group, and who owns them.
async fn category_view(ctx: &Context, read: &Read) -> Result<CategoryView, Failure> {
    let (category, groups) = (read.category.as_str(), &read.groups);
    let mut views: Vec<GroupView> = groups
        .iter()
        .map(|group| GroupView {
            group: group.clone(),
            lag: 0,
            pending: 0,
            halted: 0,
            owned: 0,
            handled: 0,
            instances: Vec::new(),
        })
        .collect();
    let mut owners: Vec<BTreeMap<String, u64>> = vec![BTreeMap::new(); groups.len()];
    let partitions = match &read.partitions {
        // Not partitioned (or every partition reaped): the base stream.
        None => {
            for (view, position) in views
                .iter_mut()
                .zip(ctx.status.base_stream(category, groups).await?)
            {
                view.lag = position.lag;
                view.pending = position.pending;
                view.handled = position.handled;
            }
            0
        }
        Some(partitions) => {
            for partition in partitions {
                for (i, position) in partition.groups.iter().enumerate() {
                    let view = &mut views[i];
                    view.lag += position.lag;
                    view.pending += position.pending;
                    view.handled += position.handled;
                    view.halted += u64::from(position.halt.is_some());
                    if let Some(owner) = &position.owner {
                        view.owned += 1;
                        *owners[i].entry(owner.instance.clone()).or_default() += 1;
                    }
                }
            }
            partitions.len()
        }
    };
    for (view, mut owned) in views.iter_mut().zip(owners) {
        for instance in ctx.status.instances(&view.group).await? {
            let owns = owned.remove(&instance.id).unwrap_or(0);
            view.instances.push(InstanceView {
                instance: instance.id,
                live: true,
                owns,
            });
        }
        // Lease holders without a live announcement: stalled or gone.
        view.instances
            .extend(owned.into_iter().map(|(instance, owns)| InstanceView {
                instance,
                live: false,
                owns,
            }));
    }
    Ok(CategoryView {
        category: category.to_owned(),
        partitions: partitions as u64,
        lag: views.iter().map(|v| v.lag).sum(),
        pending: views.iter().map(|v| v.pending).sum(),
        halted: views.iter().map(|v| v.halted).sum(),
        groups: views,
    })
}

/// What an operator should look at in `view`.
fn warnings_of(view: &CategoryView, threshold: u64) -> Vec<String> {
    let mut warnings = Vec::new();
    let category = &view.category;
    if view.partitions > threshold {
        warnings.push(format!(
            "category `{category}` has {} live partitions, over the warning threshold of {}: every \
             partition costs streams and a lease per group in Redis; check that the partition key is \
             not finer than the ordering needs (or raise --warn-partitions / [cli] warn_partitions)",
            format::count(view.partitions),
            format::count(threshold),
        ));
    }
    if view.partitions > 0 && view.groups.is_empty() {
        warnings.push(format!(
            "category `{category}` has {} {} but no registered consumer group: no worker has \
             registered for it (workers not started yet, or Redis lost its data and no worker is running \
             to register again); nothing consumes its partitions, and `ordo inspect/skip` cannot name a \
             group until one registers",
            format::count(view.partitions),
            if view.partitions == 1 {
                "partition"
            } else {
                "partitions"
            },
        ));
    }
    for group in &view.groups {
        let live = group.instances.iter().filter(|i| i.live).count();
        if view.partitions > 0 && live == 0 {
            warnings.push(format!(
                "group `{}` has {} partitions of `{category}` and no live instance: nothing is \
                 consuming them",
                group.group,
                format::count(view.partitions),
            ));
        }
        for stale in group.instances.iter().filter(|i| !i.live) {
            warnings.push(format!(
                "instance `{}` holds {} leases of group `{}` on `{category}` without a live \
                 announcement: it is stalled or gone, and its leases expire within the lease TTL",
                stale.instance, stale.owns, group.group,
            ));
        }
    }
    warnings
}

/// The text form of `snapshot`.
pub(crate) fn render(snapshot: &Snapshot, redis_url: &SecretUrl) -> String {
    if snapshot.categories.is_empty() {
        return format!("no Ordo categories found in {redis_url}\n");
    }
    let mut out = String::new();
    out.push_str(&categories_table(snapshot).render());
    let instances = instances_table(snapshot);
    if !instances.is_empty() {
        out.push('\n');
        out.push_str(&instances.render());
    }
    out.push('\n');
    out.push_str(&halted_section(snapshot));
    for warning in &snapshot.warnings {
        out.push_str(&format!("\nwarning: {}\n", format::text(warning)));
    }
    out
}

pub(crate) fn categories_table(snapshot: &Snapshot) -> Table {
    let mut table = Table::new(&[
        ("CATEGORY", Align::Left),
        ("PARTITIONS", Align::Right),
        ("GROUP", Align::Left),
        ("INSTANCES", Align::Right),
        ("OWNED", Align::Right),
        ("LAG", Align::Right),
        ("PENDING", Align::Right),
        ("HALTED", Align::Right),
    ]);
    for category in &snapshot.categories {
        let partitions = format::count(category.partitions);
        if category.groups.is_empty() {
            table.row(vec![
                category.category.clone(),
                partitions.clone(),
                "-".to_owned(),
            ]);
        }
        for group in &category.groups {
            let live = group.instances.iter().filter(|i| i.live).count() as u64;
            table.row(vec![
                category.category.clone(),
                partitions.clone(),
                group.group.clone(),
                format::count(live),
                format::count(group.owned),
                format::count(group.lag),
                format::count(group.pending),
                format::count(group.halted),
            ]);
        }
    }
    table
}

fn instances_table(snapshot: &Snapshot) -> Table {
    let mut table = Table::new(&[
        ("INSTANCE", Align::Left),
        ("GROUP", Align::Left),
        ("CATEGORY", Align::Left),
        ("OWNS", Align::Right),
        ("LIVE", Align::Left),
    ]);
    for category in &snapshot.categories {
        for group in &category.groups {
            for instance in &group.instances {
                table.row(vec![
                    instance.instance.clone(),
                    group.group.clone(),
                    category.category.clone(),
                    format::count(instance.owns),
                    if instance.live { "yes" } else { "NO" }.to_owned(),
                ]);
            }
        }
    }
    table
}

/// The halted partitions, or a line saying there are none.
pub(crate) fn halted_section(snapshot: &Snapshot) -> String {
    if snapshot.halted.is_empty() {
        return "halted partitions: none\n".to_owned();
    }
    let table = halt_table(&snapshot.halted, snapshot.server_time_ms);
    format!("halted partitions: {}\n{}", snapshot.halted.len(), table.render())
}

/// `halted` (halted partitions and parked keys) as a table, their age as of
/// `now_ms` (the Redis server's clock).
pub(crate) fn halt_table(halted: &[HaltView], now_ms: u64) -> Table {
    let mut table = Table::new(&[
        ("CATEGORY", Align::Left),
        ("KEY", Align::Left),
        ("GROUP", Align::Left),
        ("HEAD", Align::Left),
        ("ATTEMPTS", Align::Right),
        ("SINCE", Align::Left),
        ("ERROR", Align::Left),
    ]);
    for halt in halted {
        table.row(vec![
            halt.category.clone(),
            if halt.parked {
                format!("{} (parked)", halt.key)
            } else {
                halt.key.clone()
            },
            halt.group.clone(),
            halt.head.clone(),
            halt.attempts.to_string(),
            format::ago(now_ms, halt.halted_at_ms),
            format::truncate(&halt.error, ERROR_WIDTH),
        ]);
    }
    table
}
