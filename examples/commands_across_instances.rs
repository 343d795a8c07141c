//! Commands across instances: two engine instances on one Redis, each
//! sending commands for three keys; every command runs on the instance
//! that owns its key's command partition, in its key's order, and its reply
//! comes back to whichever instance sent it. A resend with the same command
//! id gets the first outcome without running again.
//!
//! ```text
//! cargo run -p ordo-redis --example commands_across_instances
//! ```
//!
//! Needs `redis-server` on the PATH (a private one is started on a free
//! port and stopped at the end), or `REDIS_URL` naming a Redis to use.
//! Both instances live in this one process to keep the example short; in
//! production each is its own process, and nothing here depends on that
//! (what they share, the journal, is only there to print what ran where).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use ordo::prelude::*;
use ordo_redis::RedisBroker;

#[derive(Aggregate)]
struct Account;

/// Deposits `amount` to an account: the account id is the routing key, so
/// all of one account's deposits run one at a time, in order, on the
/// instance that owns the account's command partition.
#[derive(Debug, Clone, Serialize, Deserialize, Command)]
#[command(part_of = Account)]
struct Deposit {
    #[routing_key]
    account: String,
    /// The deposit's number within its account, from 0.
    number: u64,
    amount: u64,
}

/// The handler's reply.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Deposited {
    account: String,
    number: u64,
    /// The instance that ran the deposit.
    ran_on: String,
    /// The account's balance after it.
    balance: u64,
}

/// What ran, in order: (instance, account, deposit number).
type Journal = Arc<Mutex<Vec<(String, String, u64)>>>;

struct Accounts {
    instance: String,
    journal: Journal,
}

#[command_handler(part_of = Account)]
impl Accounts {
    #[handle]
    async fn deposit(&self, command: &Deposit) -> anyhow::Result<Deposited> {
        let mut journal = self.journal.lock().unwrap();
        journal.push((self.instance.clone(), command.account.clone(), command.number));
        // A real handler loads the account; here the balance is what ran
        // before (every deposit of the example is 10 or, for the resend, 5).
        let earlier = journal
            .iter()
            .filter(|(_, account, _)| *account == command.account)
            .count() as u64
            - 1;
        Ok(Deposited {
            account: command.account.clone(),
            number: command.number,
            ran_on: self.instance.clone(),
            balance: earlier * 10 + command.amount,
        })
    }
}

/// One engine instance: a Redis broker and a domain running `Accounts`.
async fn instance(url: &str, id: &str, journal: &Journal) -> anyhow::Result<Domain> {
    let broker = RedisBroker::builder(url).instance_id(id).build().await?;
    Ok(Domain::builder()
        .aggregate::<Account>()
        .command_handler(Accounts {
            instance: id.to_owned(),
            journal: journal.clone(),
        })
        .broker(broker)
        .init()?)
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn,fred=error"));
    tracing_subscriber::fmt().with_env_filter(filter).init();
    // REDIS_URL if set, else a private redis-server (stopped when dropped).
    let redis = tokio::task::spawn_blocking(ordo_testkit::Redis::start).await??;
    let url = redis.url();
    // Unique names, so runs against a shared Redis never meet.
    let run = std::process::id();
    let journal = Journal::default();
    let ids = [format!("a-{run}"), format!("b-{run}")];
    let domains = [
        instance(&url, &ids[0], &journal).await?,
        instance(&url, &ids[1], &journal).await?,
    ];
    // Both run commands: each owns some of the command partitions.
    let running = [domains[0].start(), domains[1].start()];

    // Three accounts, deposits sent concurrently per account, each
    // account's deposits one after another from A and B alternately.
    let accounts: Vec<String> = (1..=3).map(|n| format!("acc-{n}-{run}")).collect();
    let mut sends = tokio::task::JoinSet::new();
    for account in accounts.clone() {
        let domains = domains.clone();
        let ids = ids.clone();
        sends.spawn(async move {
            let mut replies = Vec::new();
            for number in 0..4 {
                let sender = (number % 2) as usize;
                let command = Deposit {
                    account: account.clone(),
                    number,
                    amount: 10,
                };
                let reply: Deposited = domains[sender].send(command).await?;
                anyhow::ensure!(
                    reply.account == account && reply.number == number,
                    "the reply {reply:?} is not deposit {number} of {account}'s"
                );
                replies.push((ids[sender].clone(), reply));
            }
            anyhow::Ok(replies)
        });
    }
    let mut replies = Vec::new();
    while let Some(sent) = sends.join_next().await {
        replies.extend(sent??);
    }

    let ran = journal.lock().unwrap().clone();
    let mut per_account: BTreeMap<&str, Vec<(u64, &str)>> = BTreeMap::new();
    for (instance, account, number) in &ran {
        per_account.entry(account).or_default().push((*number, instance));
    }
    for account in &accounts {
        let runs = &per_account[account.as_str()];
        let order: Vec<String> = runs
            .iter()
            .map(|(number, instance)| {
                let sent_by = &replies
                    .iter()
                    .find(|(_, reply)| reply.account == *account && reply.number == *number)
                    .expect("every deposit replied")
                    .0;
                format!("#{number} ran on {instance} (sent by {sent_by})")
            })
            .collect();
        println!("{account}: {}", order.join(", "));
        let numbers: Vec<u64> = runs.iter().map(|(number, _)| *number).collect();
        anyhow::ensure!(numbers == [0, 1, 2, 3], "{account}'s deposits ran as {numbers:?}");
    }

    // A resend with the same id, from the other instance, gets the first
    // outcome: the deposit runs once.
    let id = format!("deposit-once-{run}");
    let deposit = Deposit {
        account: accounts[0].clone(),
        number: 4,
        amount: 5,
    };
    let first: Deposited = domains[0]
        .send_with(deposit.clone(), SendOptions::new().id(&id))
        .await?;
    let again: Deposited = domains[1].send_with(deposit, SendOptions::new().id(&id)).await?;
    let runs = journal
        .lock()
        .unwrap()
        .iter()
        .filter(|(_, account, number)| *account == accounts[0] && *number == 4)
        .count();
    println!("resend of {id}: first reply {first:?}, resend's {again:?}, runs: {runs}");
    anyhow::ensure!(first == again && runs == 1, "the resend ran the deposit again");

    for running in running {
        running.shutdown().await?;
    }
    println!("done");
    Ok(())
}
