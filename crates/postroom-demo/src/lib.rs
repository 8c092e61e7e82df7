//! # postroom-demo
//!
//! The source article's orders → inventory shop, run two ways from the `postroom` binary:
//!
//! - [`demo`]: 40 orders with every fault of the article injected (transient failures that
//!   heal within the retry budget and one that outlasts it, corrupt JSON, an unknown schema
//!   version, out-of-stock outcomes through the consumer's own outbox, cancellations ordered
//!   by the version guard, duplicate deliveries, and the consumer process SIGKILLed between
//!   its COMMIT and its ack), checked from the database at the end;
//! - [`soak`]: a producer, relays and consumers as separate processes killed at random for
//!   thousands of messages, checked the same way.
//!
//! Both open their store and transport through `postroom_ops`' registry, from URLs; the shop
//! ([`shop`]) is written once in SQL that SQLite and PostgreSQL both run. Child processes
//! are this same binary with a hidden subcommand ([`demo::consumer::COMMAND`],
//! [`soak::worker::COMMAND`]); they receive database and broker URLs through their
//! environment, never on their command line.
//!
//! ```no_run
//! use clap::Parser;
//!
//! #[derive(Parser)]
//! struct Cli {
//!     #[command(flatten)]
//!     demo: postroom_demo::args::DemoArgs,
//! }
//!
//! # async fn run() -> postroom_ops::OpsResult {
//! let cli = Cli::parse();
//! postroom_demo::demo::run(cli.demo, &Default::default()).await
//! # }
//! ```

pub mod args;
pub mod demo;
pub mod faults;
pub mod process;
pub mod shop;
pub mod soak;
pub mod stack;
pub mod verdict;
