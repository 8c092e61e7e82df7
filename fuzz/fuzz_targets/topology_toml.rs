//! Any text given as a RabbitMQ topology file: a configuration or a clear error, never a
//! panic; an accepted configuration plans a topology of bounded size.
#![no_main]

use libfuzzer_sys::fuzz_target;
use postroom_rabbitmq::TopologyConfig;
use postroom_rabbitmq::topology::desired::DesiredTopology;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(cfg) = TopologyConfig::from_toml(text) {
        let desired = DesiredTopology::of(&cfg);
        assert!(!desired.queues.is_empty() || cfg.consumers.is_empty());
    }
});
