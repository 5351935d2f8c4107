//! `metapu-lab sim-days`: simulated devices over days, as captures `week` reads.
//!
//! The validation streams last minutes, and the shared week is not to be chosen on.
//! What a device's windows do over days (bursts and quiet, day after day) is chosen on
//! these: the simulator's diurnal households, held-out device types by default.

use std::path::PathBuf;

use anyhow::Context;

use metapu::traffic::devices::format_mac;
use metapu::traffic::pcap::PcapWriter;
use metapu::traffic::profiles::DeviceType;
use metapu::traffic::simulate::{device_macs, device_packets, plan, FleetConfig};

#[derive(Debug, clap::Args)]
pub struct SimDaysArgs {
    /// Devices, their types assigned in turn.
    #[arg(long, default_value_t = 6)]
    devices: usize,
    /// Device types (the shipped model never saw baby monitors and webcams).
    #[arg(long, default_value = "baby_monitor,webcam", value_delimiter = ',')]
    types: Vec<DeviceType>,
    #[arg(long, default_value_t = 3.0)]
    days: f64,
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// A folder: NAME.pcap and NAME.mac per device.
    #[arg(long)]
    out: PathBuf,
}

pub fn run(a: SimDaysArgs) -> anyhow::Result<()> {
    anyhow::ensure!(a.days.is_finite() && a.days > 0.0, "--days must be positive");
    let cfg = FleetConfig {
        devices: a.devices,
        types: a.types.clone(),
        attacks: Vec::new(),
        duration_s: a.days * 86_400.0,
        seed: a.seed,
        attacked_share: 0.0,
        diurnal: true,
        ..FleetConfig::default()
    };
    std::fs::create_dir_all(&a.out).with_context(|| format!("creating {}", a.out.display()))?;
    for device in plan(&cfg) {
        let packets = device_packets(&cfg, &device);
        let (mac, gateway) = device_macs(&device);
        let name = format!("sim-{}", device.name);
        let path = a.out.join(format!("{name}.pcap"));
        let file = std::fs::File::create(&path).with_context(|| format!("creating {}", path.display()))?;
        let mut w = PcapWriter::new(std::io::BufWriter::new(file))?;
        for p in &packets {
            let to = if p.packet.src_mac == mac { gateway } else { mac };
            w.write(&p.packet, to, p.proto)?;
        }
        w.finish()?;
        std::fs::write(a.out.join(format!("{name}.mac")), format_mac(mac) + "\n")?;
        println!("sim-days: {name}: {} packets over {} days", packets.len(), a.days);
    }
    Ok(())
}
