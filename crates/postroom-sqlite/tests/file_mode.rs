//! The database file holds parked payloads: a new one, with its `-wal` and `-shm` files, is
//! readable and writable by its owner only; an existing file keeps the mode its owner gave it.
#![cfg(unix)]

use postroom_core::{Envelope, OutgoingMessage};
use postroom_sqlite::{SqliteStore, outbox};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::Path;

fn mode(path: &Path) -> u32 {
    std::fs::metadata(path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .permissions()
        .mode()
        & 0o777
}

async fn write_a_row(store: &SqliteStore) {
    let env = Envelope::builder("order.created", "t")
        .aggregate("order", "o-1", 1)
        .build();
    let mut tx = store.begin().await.unwrap();
    outbox::enqueue(
        &mut tx,
        &OutgoingMessage::from_envelope(&env, "order.created"),
    )
    .await
    .unwrap();
    tx.commit().await.unwrap();
}

#[tokio::test]
async fn a_new_database_and_its_wal_and_shm_files_are_private_to_their_owner() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("app.db");
    let store = SqliteStore::open(&db).await.unwrap();
    write_a_row(&store).await;
    for file in ["app.db", "app.db-wal", "app.db-shm"] {
        assert_eq!(
            mode(&dir.path().join(file)),
            0o600,
            "{file} is readable and writable by its owner only"
        );
    }
}

#[tokio::test]
async fn an_existing_database_keeps_its_mode() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("shared.db");
    std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o640)
        .open(&db)
        .unwrap();
    std::fs::set_permissions(&db, std::fs::Permissions::from_mode(0o640)).unwrap();
    let store = SqliteStore::open(&db).await.unwrap();
    write_a_row(&store).await;
    assert_eq!(mode(&db), 0o640, "the owner's choice stands");
    assert_eq!(mode(&dir.path().join("shared.db-wal")), 0o640);
}

/// The outbox keeps a message's order under its aggregate key header, else its id: the same
/// rule as the PostgreSQL outbox, and the key consumers order by.
#[tokio::test]
async fn the_outbox_orders_a_message_under_its_aggregate_key_header_else_its_id() {
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::open(dir.path().join("k.db")).await.unwrap();
    let env = Envelope::builder("order.created", "t")
        .aggregate("order", "o1", 1)
        .build();
    let keyed = OutgoingMessage::from_envelope(&env, "order.created");
    let mut bare = OutgoingMessage::from_envelope(&env, "order.created");
    bare.id = postroom_core::MessageId::new();
    bare.headers.clear();
    let mut tx = store.begin().await.unwrap();
    for m in [&keyed, &bare] {
        outbox::enqueue(&mut tx, m).await.unwrap();
    }
    tx.commit().await.unwrap();
    for (m, want) in [
        (&keyed, "order:o1".to_string()),
        (&bare, bare.id.to_string()),
    ] {
        let key: String =
            sqlx::query_scalar("SELECT aggregate_key FROM postroom_outbox WHERE message_id = ?")
                .bind(m.id.to_string())
                .fetch_one(store.pool())
                .await
                .unwrap();
        assert_eq!(key, want);
        assert_eq!(m.aggregate_key(), want);
    }
}
