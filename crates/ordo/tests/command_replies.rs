//! `Domain::send` on the inline broker: a command handler's reply reaches
//! its caller, typed; errors stay typed; a bad command id is refused before
//! anything runs.

use std::sync::Mutex;
use std::time::Duration;

use ordo::prelude::*;
use ordo::runtime::dispatch::MAX_COMMAND_ID_BYTES;

#[derive(Debug, Aggregate)]
struct Cart;

#[derive(Debug, Clone, Serialize, Deserialize, Command)]
#[command(part_of = Cart)]
struct AddItem {
    #[routing_key]
    cart_id: String,
    item: String,
    fail: bool,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Added {
    cart_id: String,
    items: usize,
}

#[derive(Default)]
struct Carts {
    items: Mutex<Vec<String>>,
}

#[command_handler(part_of = Cart)]
impl Carts {
    #[handle]
    async fn add(&self, command: &AddItem) -> anyhow::Result<Added> {
        anyhow::ensure!(!command.fail, "item {} is out of stock", command.item);
        let mut items = self.items.lock().unwrap();
        items.push(command.item.clone());
        Ok(Added {
            cart_id: command.cart_id.clone(),
            items: items.len(),
        })
    }
}

fn add(cart: &str, item: &str, fail: bool) -> AddItem {
    AddItem {
        cart_id: cart.into(),
        item: item.into(),
        fail,
    }
}

fn domain() -> anyhow::Result<Domain> {
    Ok(Domain::builder()
        .aggregate::<Cart>()
        .command_handler(Carts::default())
        .init()?)
}

#[tokio::test]
async fn send_returns_the_handlers_reply_typed() -> anyhow::Result<()> {
    let domain = domain()?;
    let first: Added = domain.send(add("c-1", "apple", false)).await?;
    assert_eq!(
        first,
        Added {
            cart_id: "c-1".into(),
            items: 1
        }
    );
    let second: Added = domain
        .send_with(
            add("c-1", "pear", false),
            SendOptions::new().id("add-pear").timeout(Duration::from_secs(1)),
        )
        .await?;
    assert_eq!(second.items, 2);
    // dispatch drops the reply.
    domain.dispatch(add("c-1", "plum", false)).await?;
    Ok(())
}

#[tokio::test]
async fn a_handler_error_and_a_reply_of_another_type_are_typed_errors() -> anyhow::Result<()> {
    let domain = domain()?;
    let failed = domain
        .send::<_, Added>(add("c-1", "gold", true))
        .await
        .unwrap_err();
    assert!(matches!(failed, DispatchError::Handler { .. }), "{failed:?}");
    assert!(
        failed.to_string().contains("item gold is out of stock"),
        "{failed}"
    );

    let wrong = domain
        .send::<_, Vec<u8>>(add("c-1", "apple", false))
        .await
        .unwrap_err();
    assert!(matches!(wrong, DispatchError::Reply { .. }), "{wrong:?}");
    assert!(wrong.to_string().contains("the command did run"), "{wrong}");
    Ok(())
}

#[tokio::test]
async fn a_bad_command_id_is_refused_before_anything_runs() -> anyhow::Result<()> {
    let domain = domain()?;
    for (id, why) in [
        (String::new(), "empty"),
        ("a\nb".to_owned(), "control character"),
        ("x".repeat(MAX_COMMAND_ID_BYTES + 1), "bytes long"),
    ] {
        let refused = domain
            .send_with::<_, Added>(add("c-9", "apple", false), SendOptions::new().id(id))
            .await
            .unwrap_err();
        assert!(matches!(refused, DispatchError::InvalidId { .. }), "{refused:?}");
        assert!(refused.to_string().contains(why), "{refused}");
    }
    let first: Added = domain.send(add("c-9", "apple", false)).await?;
    assert_eq!(first.items, 1, "nothing ran for the refused sends");
    Ok(())
}
