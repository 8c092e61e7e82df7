//! `postroom parking list | show | redrive | runs | ingest`: flags in, text or JSON out; the
//! work is `postroom_ops::parking`'s.

use crate::cli::{
    FilterArgs, IngestArgs, ListArgs, ParkingCommand, PayloadArgs, RedriveArgs, RunsArgs, ShowArgs,
};
use crate::config::ConfigFile;
use crate::connect;
use crate::output::{out, write_error as io};
use crate::prompt::confirm;
use postroom_core::ParkingFilter;
use postroom_core::parking::redrive::RedriveSkip;
use postroom_ops::args::PasswordArgs;
use postroom_ops::parking::filter::parse_id;
use postroom_ops::parking::ingest::ingest_all;
use postroom_ops::parking::{
    FilterSpec, PayloadView, Redrive, RedriveGuard, escape_controls, parked_json, payload_text,
    run_json,
};
use postroom_ops::time::parse_span;
use postroom_ops::{OpsError, OpsResult, Registry};
use std::io::{IsTerminal, Write};
use std::time::Duration;

/// The longest `--idle` of an ingest.
const MAX_IDLE: Duration = Duration::from_secs(3600);

/// Run a parking subcommand.
pub async fn run(cmd: ParkingCommand, config: &ConfigFile, passwords: &PasswordArgs) -> OpsResult {
    let registry = Registry::builtin();
    let ctx = Ctx {
        registry: &registry,
        config,
        passwords,
    };
    match cmd {
        ParkingCommand::List(a) => list(&ctx, a).await,
        ParkingCommand::Show(a) => show(&ctx, a).await,
        ParkingCommand::Redrive(a) => redrive(&ctx, a).await,
        ParkingCommand::Runs(a) => runs(&ctx, a).await,
        ParkingCommand::Ingest(a) => ingest(&ctx, a).await,
    }
}

struct Ctx<'a> {
    registry: &'a Registry,
    config: &'a ConfigFile,
    passwords: &'a PasswordArgs,
}

impl Ctx<'_> {
    async fn store(
        &self,
        args: &crate::cli::StoreArgs,
        create: bool,
    ) -> OpsResult<std::sync::Arc<dyn postroom_ops::registry::Store>> {
        connect::store(self.registry, args, self.config, self.passwords, create).await
    }
}

/// The store filter from the flags.
pub fn filter_of(f: &FilterArgs, include_redriven: bool) -> OpsResult<ParkingFilter> {
    FilterSpec {
        message_type: f.message_type.clone(),
        error_class: f.error_class.clone(),
        error_code: f.error_code.clone(),
        consumer: f.consumer.clone(),
        since: f.since.clone(),
        until: f.until.clone(),
        ids: f.ids.clone(),
        include_redriven,
    }
    .to_filter(chrono::Utc::now())
}

fn view(p: &PayloadArgs) -> PayloadView {
    PayloadView {
        show: p.show_payload,
        limit: p.payload_limit,
    }
}

async fn list(ctx: &Ctx<'_>, a: ListArgs) -> OpsResult {
    let filter = filter_of(&a.filter, a.include_redriven)?;
    let store = ctx.store(&a.store, false).await?.parking();
    let total = store.count(&filter).await?;
    let rows = store.search(&filter, a.limit).await?;
    let view = view(&a.payload);
    let mut out = std::io::stdout().lock();
    if a.json {
        for m in &rows {
            writeln!(out, "{}", parked_json(m, view)).map_err(io)?;
        }
        return Ok(());
    }
    writeln!(
        out,
        "{total} parked message(s) match; showing {}",
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
        let error = postroom_core::message::truncate(&m.error_message, 80);
        writeln!(
            out,
            "{:<36}  {:<20}  {:<14}  {:<9}  {:<24}  {:>3}  {:<8}  {}: {}",
            m.message_id,
            m.parked_at.format("%Y-%m-%d %H:%M:%S"),
            escape_controls(&m.consumer),
            m.error_class.as_str(),
            escape_controls(m.message_type.as_deref().unwrap_or("?")),
            m.attempts,
            m.status.as_str(),
            escape_controls(&m.error_code),
            escape_controls(&error),
        )
        .map_err(io)?;
        if view.show {
            let body = escape_controls(&payload_text(&m.body, view));
            writeln!(out, "    body: {body}").map_err(io)?;
        }
    }
    Ok(())
}

async fn show(ctx: &Ctx<'_>, a: ShowArgs) -> OpsResult {
    let id = parse_id(&a.id)?;
    let rows = ctx.store(&a.store, false).await?.parking().get(id).await?;
    if rows.is_empty() {
        return Err(OpsError::failed(format!("no parked message with id {id}")));
    }
    for m in &rows {
        let v = parked_json(m, view(&a.payload));
        if a.json {
            out!("{v}")?;
        } else {
            let pretty =
                serde_json::to_string_pretty(&v).map_err(|e| OpsError::failed(e.to_string()))?;
            out!("{pretty}")?;
        }
    }
    Ok(())
}

async fn redrive(ctx: &Ctx<'_>, a: RedriveArgs) -> OpsResult {
    let rate = match a.rate.or(ctx.config.parking.redrive_rate) {
        Some(r) => postroom_ops::limits::check_rate(r)?,
        None => 10.0,
    };
    let filter = filter_of(&a.filter, false)?;
    let running = connect::started(
        &a.store,
        a.broker.as_ref().map(|url| (url, a.topology.as_path())),
        ctx.config,
        ctx.passwords,
        false,
    )
    .await?;
    let guard = RedriveGuard {
        force: a.force,
        replay_window: a.replay_window,
    };
    let redrive = Redrive::open(running.stack(), guard)?;
    let run = if let Some(run_id) = &a.resume {
        redrive.resume(run_id).await?
    } else {
        let preview = redrive.preview(&filter, a.limit).await?;
        let would_skip = |reason: RedriveSkip| {
            preview
                .iter()
                .filter(|(_, skip)| *skip == Some(reason))
                .count()
        };
        let skipping = preview.iter().filter(|(_, skip)| skip.is_some()).count();
        if a.dry_run || !a.json {
            eprintln!(
                "{} message(s) selected: {} would go back, {skipping} would be skipped (rate {rate}/s):",
                preview.len(),
                preview.len() - skipping,
            );
            for (m, skip) in preview.iter().take(20) {
                eprintln!(
                    "  {}  {}  {}  {}{}",
                    m.message_id,
                    escape_controls(&m.consumer),
                    escape_controls(m.message_type.as_deref().unwrap_or("?")),
                    escape_controls(&m.error_code),
                    skip.map_or(String::new(), |r| format!("  skip: {}", skip_in_words(r)))
                );
            }
            if preview.len() > 20 {
                eprintln!("  … and {} more", preview.len() - 20);
            }
        }
        if a.dry_run {
            if a.json {
                let by_reason: serde_json::Map<String, serde_json::Value> = RedriveSkip::ALL
                    .iter()
                    .map(|r| (r.as_str().to_string(), would_skip(*r).into()))
                    .collect();
                out!(
                    "{}",
                    serde_json::json!({
                        "dry_run": true,
                        "selected": preview.len(),
                        "would_send": preview.len() - skipping,
                        "would_skip": by_reason,
                    })
                )?;
            }
            return Ok(());
        }
        if preview.is_empty() {
            return Ok(());
        }
        if !a.yes
            && !confirm(
                &format!(
                    "Redrive {} message(s) ({} would go back, {skipping} would be skipped)?",
                    preview.len(),
                    preview.len() - skipping
                ),
                "redrive",
            )?
        {
            return Err(OpsError::failed(
                "redrive not confirmed; nothing changed (use --yes to skip the question)",
            ));
        }
        let operator = ctx
            .config
            .parking
            .operator
            .clone()
            .or_else(|| std::env::var("USER").ok())
            .unwrap_or_else(|| "unknown".into());
        redrive.start(&filter, a.limit, &operator).await?
    };
    eprintln!(
        "redrive run {} ({} selected, {} already done)",
        run.id, run.total, run.done
    );
    let tty = std::io::stderr().is_terminal();
    let result = redrive
        .execute(&run, rate, |p| {
            let line = format!(
                "  {}/{} done, {} skipped in this pass",
                p.done, p.total, p.skipped
            );
            if tty {
                eprint!("\r{line}");
            } else if p.done == p.total || p.done % 100 == 0 {
                eprintln!("{line}");
            }
        })
        .await;
    if tty {
        eprintln!();
    }
    running.shutdown().await;
    let report = result.map_err(|e| e.context(format!("resume with --resume {}", run.id)))?;
    let done = &report.run;
    let skipped: Vec<_> = report
        .skipped
        .iter()
        .map(|s| {
            serde_json::json!({
                "message_id": s.message.message_id.to_string(),
                "consumer": s.message.consumer,
                "reason": s.reason.as_str(),
            })
        })
        .collect();
    if a.json {
        out!(
            "{}",
            serde_json::json!({
                "run_id": done.id,
                "total": done.total,
                "done": done.done,
                "skipped": skipped,
            })
        )?;
    } else {
        out!(
            "redrive run {}: {}/{} done, {} skipped in this pass",
            done.id,
            done.done,
            done.total,
            report.skipped.len()
        )?;
        for s in &report.skipped {
            out!(
                "  skipped {}  {}  {}",
                s.message.message_id,
                escape_controls(&s.message.consumer),
                skip_in_words(s.reason)
            )?;
        }
    }
    Ok(())
}

/// Why a message is not sent back, in words, with what the command line can do about it.
fn skip_in_words(reason: RedriveSkip) -> String {
    match reason {
        RedriveSkip::AlreadyApplied => reason.in_words().to_string(),
        RedriveSkip::OlderThanReplayWindow => {
            "older than the replay window (check by hand; --force sends it)".to_string()
        }
    }
}

async fn runs(ctx: &Ctx<'_>, a: RunsArgs) -> OpsResult {
    let store = ctx.store(&a.store, false).await?.parking();
    for r in store.redrive_runs(a.limit).await? {
        if a.json {
            out!("{}", run_json(&r))?;
        } else {
            out!(
                "{}  {}  {:<12}  {}/{}  {}",
                r.id,
                r.created_at.format("%Y-%m-%d %H:%M:%S"),
                escape_controls(&r.operator),
                r.done,
                r.total,
                escape_controls(&r.filter)
            )?;
        }
    }
    Ok(())
}

async fn ingest(ctx: &Ctx<'_>, a: IngestArgs) -> OpsResult {
    let idle = parse_span(&a.idle)?;
    if idle.is_zero() || idle > MAX_IDLE {
        return Err(OpsError::usage(format!(
            "--idle must be above zero and at most 1h, not {}",
            a.idle
        )));
    }
    let running = connect::started(
        &a.store,
        Some((&a.broker.broker, a.broker.topology.as_path())),
        ctx.config,
        ctx.passwords,
        true,
    )
    .await?;
    let stack = running.stack().clone();
    let store = postroom_ops::store_of(&stack)?;
    let consumers: Vec<String> = stack
        .consumers()
        .into_iter()
        .filter(|c| a.consumer.as_ref().is_none_or(|only| only == c))
        .collect();
    let moved = ingest_all(
        stack.transport().as_ref(),
        &consumers,
        store.parking(),
        idle,
    )
    .await;
    running.shutdown().await;
    let mut total = 0;
    for (c, n) in moved? {
        eprintln!("  {c}: {n} parked message(s) moved into the store");
        total += n;
    }
    out!("{total} parked message(s) ingested")?;
    Ok(())
}
