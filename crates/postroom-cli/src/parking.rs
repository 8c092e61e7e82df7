//! `postroom parking list | show | redrive | runs`.

use crate::cli::{
    FilterArgs, IngestArgs, ListArgs, ParkingCommand, RedriveArgs, RunsArgs, ShowArgs, StoreArgs,
};
use crate::config::ConfigFile;
use crate::error::{CliError, CliResult};
use crate::stack::{DatabaseUrl, open_parking};
use chrono::{DateTime, Utc};
use postroom_core::retry::ladder::parse_duration;
use postroom_core::{MessageId, ParkedMessage, ParkingFilter, ParkingStore, Publisher, Redriver};
use std::io::{IsTerminal, Write};
use std::sync::Arc;

/// Run a parking subcommand.
pub async fn run(cmd: ParkingCommand, config: &ConfigFile) -> CliResult {
    match cmd {
        ParkingCommand::List(a) => list(a, config).await,
        ParkingCommand::Show(a) => show(a, config).await,
        ParkingCommand::Redrive(a) => redrive(a, config).await,
        ParkingCommand::Runs(a) => runs(a, config).await,
        ParkingCommand::Ingest(a) => ingest(a, config).await,
    }
}

async fn open(
    store: &StoreArgs,
    config: &ConfigFile,
) -> CliResult<(Arc<dyn ParkingStore>, Arc<dyn Publisher>)> {
    open_or_create(store, config, false).await
}

async fn open_or_create(
    store: &StoreArgs,
    config: &ConfigFile,
    create: bool,
) -> CliResult<(Arc<dyn ParkingStore>, Arc<dyn Publisher>)> {
    let raw = store
        .database
        .clone()
        .or_else(|| config.database.clone())
        .unwrap_or_else(|| "postroom.db".into());
    let url = DatabaseUrl::parse(&raw)?;
    let prefix = store
        .table_prefix
        .clone()
        .or_else(|| config.table_prefix.clone())
        .unwrap_or_else(|| "postroom_".into());
    open_parking(&url, &prefix, create).await
}

fn parse_time(s: &str) -> CliResult<DateTime<Utc>> {
    if let Ok(t) = DateTime::parse_from_rfc3339(s) {
        return Ok(t.with_timezone(&Utc));
    }
    let age = if let Some(days) = s.strip_suffix('d') {
        days.parse::<u64>()
            .map(|d| std::time::Duration::from_secs(d * 86_400))
            .map_err(|e| e.to_string())
    } else {
        parse_duration(s)
    }
    .map_err(|_| {
        CliError::usage(format!(
            "bad time {s:?}: use RFC 3339 (2026-01-31T12:00:00Z) or an age (30m, 2h, 7d)"
        ))
    })?;
    Ok(Utc::now() - chrono::Duration::from_std(age).map_err(|e| CliError::usage(e.to_string()))?)
}

/// Build the store filter from the flags.
pub fn filter_of(f: &FilterArgs) -> CliResult<ParkingFilter> {
    Ok(ParkingFilter {
        message_type: f.message_type.clone(),
        error_class: f
            .error_class
            .as_deref()
            .map(str::parse)
            .transpose()
            .map_err(CliError::usage)?,
        error_code: f.error_code.clone(),
        consumer: f.consumer.clone(),
        since: f.since.as_deref().map(parse_time).transpose()?,
        until: f.until.as_deref().map(parse_time).transpose()?,
        ids: f
            .ids
            .iter()
            .map(|s| {
                s.parse::<MessageId>()
                    .map_err(|e| CliError::usage(format!("bad message id {s:?}: {e}")))
            })
            .collect::<CliResult<_>>()?,
        include_redriven: false,
    })
}

/// A parked message as JSON, with the body redacted unless asked for.
pub fn to_json(m: &ParkedMessage, show_payload: bool) -> serde_json::Value {
    let mut v = serde_json::to_value(m).expect("parked message serialises");
    v["body"] = if show_payload {
        match std::str::from_utf8(&m.body) {
            Ok(s) => serde_json::Value::String(s.to_string()),
            Err(_) => serde_json::Value::String(format!("<{} bytes, not UTF-8>", m.body.len())),
        }
    } else {
        serde_json::Value::String(format!(
            "<redacted: {} bytes; --show-payload to see>",
            m.body.len()
        ))
    };
    v
}

async fn list(a: ListArgs, config: &ConfigFile) -> CliResult {
    let (store, _) = open(&a.store, config).await?;
    let mut filter = filter_of(&a.filter)?;
    filter.include_redriven = a.include_redriven;
    let total = store.count(&filter).await?;
    let rows = store.search(&filter, a.limit).await?;
    let mut out = std::io::stdout().lock();
    if a.json {
        for m in &rows {
            writeln!(out, "{}", to_json(m, a.show_payload)).map_err(io)?;
        }
        return Ok(());
    }
    writeln!(
        out,
        "{} parked message(s) match; showing {}",
        total,
        rows.len()
    )
    .map_err(io)?;
    if rows.is_empty() {
        return Ok(());
    }
    writeln!(
        out,
        "{:<36}  {:<20}  {:<14}  {:<9}  {:<24}  {:>3}  {:<8}  ERROR",
        "ID", "PARKED AT", "CONSUMER", "CLASS", "TYPE", "ATT", "STATUS"
    )
    .map_err(io)?;
    for m in &rows {
        writeln!(
            out,
            "{:<36}  {:<20}  {:<14}  {:<9}  {:<24}  {:>3}  {:<8}  {}: {}",
            m.message_id,
            m.parked_at.format("%Y-%m-%d %H:%M:%S"),
            m.consumer,
            m.error_class.as_str(),
            m.message_type.as_deref().unwrap_or("?"),
            m.attempts,
            m.status.as_str(),
            m.error_code,
            postroom_core::message::truncate(&m.error_message, 80),
        )
        .map_err(io)?;
        if a.show_payload {
            writeln!(out, "    body: {}", String::from_utf8_lossy(&m.body)).map_err(io)?;
        }
    }
    Ok(())
}

async fn show(a: ShowArgs, config: &ConfigFile) -> CliResult {
    let (store, _) = open(&a.store, config).await?;
    let id: MessageId =
        a.id.parse()
            .map_err(|e| CliError::usage(format!("bad message id {:?}: {e}", a.id)))?;
    let rows = store.get(id).await?;
    if rows.is_empty() {
        return Err(CliError::failed(format!("no parked message with id {id}")));
    }
    for m in &rows {
        let v = to_json(m, a.show_payload);
        if a.json {
            println!("{v}");
        } else {
            println!("{}", serde_json::to_string_pretty(&v).expect("json prints"));
        }
    }
    Ok(())
}

async fn redrive(a: RedriveArgs, config: &ConfigFile) -> CliResult {
    let (store, embedded) = open(&a.store, config).await?;
    let mut rabbit = None;
    let publisher: Arc<dyn Publisher> = match &a.broker {
        None => embedded,
        Some(url) => {
            let args = crate::cli::BrokerArgs {
                topology: a.topology.clone(),
                broker: url.clone(),
            };
            let topology = crate::topology::load(&args).await?;
            let broker = postroom_rabbitmq::Broker::connect(url).await?;
            rabbit = Some(broker.clone());
            Arc::new(postroom_rabbitmq::ConfirmingPublisher::new(
                broker,
                topology.config(),
            ))
        }
    };
    let rate = a.rate.or(config.parking.redrive_rate).unwrap_or(10.0);
    if !(rate.is_finite() && rate > 0.0) {
        return Err(CliError::usage(format!(
            "--rate must be a positive number of messages per second, got {rate}"
        )));
    }
    let redriver = Redriver::new(store.clone(), publisher);
    let run = if let Some(run_id) = &a.resume {
        store
            .redrive_run(run_id)
            .await?
            .ok_or_else(|| CliError::usage(format!("no redrive run {run_id}")))?
    } else {
        let filter = filter_of(&a.filter)?;
        let preview = redriver.preview(&filter, a.limit).await?;
        if a.dry_run || !a.json {
            eprintln!(
                "{} message(s) selected for redrive at {rate}/s:",
                preview.len()
            );
            for m in preview.iter().take(20) {
                eprintln!(
                    "  {}  {}  {}  {}",
                    m.message_id,
                    m.consumer,
                    m.message_type.as_deref().unwrap_or("?"),
                    m.error_code
                );
            }
            if preview.len() > 20 {
                eprintln!("  … and {} more", preview.len() - 20);
            }
        }
        if a.dry_run {
            if a.json {
                println!(
                    "{}",
                    serde_json::json!({"dry_run": true, "selected": preview.len()})
                );
            }
            return Ok(());
        }
        if preview.is_empty() {
            return Ok(());
        }
        if !a.yes && !confirm(&format!("Redrive {} message(s)?", preview.len()))? {
            return Err(CliError::failed(
                "redrive not confirmed; nothing changed (use --yes to skip the question)",
            ));
        }
        let operator = config
            .parking
            .operator
            .clone()
            .or_else(|| std::env::var("USER").ok())
            .unwrap_or_else(|| "unknown".into());
        store
            .create_redrive_run(&filter, a.limit, &operator)
            .await?
    };
    eprintln!(
        "redrive run {} ({} selected, {} already done)",
        run.id, run.total, run.done
    );
    let tty = std::io::stderr().is_terminal();
    let result = redriver
        .execute(&run.id, rate, |p| {
            if tty {
                eprint!("\r  redriven {}/{}", p.done, p.total);
            } else if p.done == p.total || p.done % 100 == 0 {
                eprintln!("  redriven {}/{}", p.done, p.total);
            }
        })
        .await;
    if tty {
        eprintln!();
    }
    if let Some(b) = rabbit {
        b.close().await;
    }
    let done = result.map_err(|e| {
        CliError::failed(format!(
            "redrive stopped: {e}; resume with --resume {}",
            run.id
        ))
    })?;
    if a.json {
        println!(
            "{}",
            serde_json::json!({"run_id": done.id, "total": done.total, "done": done.done})
        );
    } else {
        println!(
            "redrive run {}: {}/{} sent back",
            done.id, done.done, done.total
        );
    }
    Ok(())
}

async fn runs(a: RunsArgs, config: &ConfigFile) -> CliResult {
    let (store, _) = open(&a.store, config).await?;
    for r in store.redrive_runs(a.limit).await? {
        if a.json {
            println!("{}", serde_json::to_value(&r).expect("run serialises"));
        } else {
            println!(
                "{}  {}  {:<12}  {}/{}  {}",
                r.id,
                r.created_at.format("%Y-%m-%d %H:%M:%S"),
                r.operator,
                r.done,
                r.total,
                r.filter
            );
        }
    }
    Ok(())
}

fn confirm(question: &str) -> CliResult<bool> {
    if !std::io::stdin().is_terminal() {
        return Err(CliError::usage(
            "refusing to redrive without confirmation: stdin is not a terminal; pass --yes",
        ));
    }
    eprint!("{question} [y/N] ");
    let _ = std::io::stderr().flush();
    let mut line = String::new();
    std::io::stdin().read_line(&mut line).map_err(io)?;
    Ok(matches!(line.trim(), "y" | "Y" | "yes"))
}

fn io(e: std::io::Error) -> CliError {
    CliError::failed(format!("cannot write output: {e}"))
}

async fn ingest(a: IngestArgs, config: &ConfigFile) -> CliResult {
    let (store, _) = open_or_create(&a.store, config, true).await?;
    let topology = crate::topology::load(&a.broker).await?;
    let idle = parse_duration(&a.idle).map_err(CliError::usage)?;
    let broker = postroom_rabbitmq::Broker::connect(&a.broker.broker).await?;
    let mut total = 0;
    for c in &topology.config().consumers {
        if a.consumer.as_ref().is_some_and(|only| only != &c.name) {
            continue;
        }
        let n = postroom_rabbitmq::ingest_parking(
            broker.clone(),
            topology.names(&c.name),
            store.clone(),
            idle,
        )
        .await?;
        eprintln!("  {}: {n} parked message(s) moved into the store", c.name);
        total += n;
    }
    println!("{total} parked message(s) ingested");
    broker.close().await;
    Ok(())
}
