//! Pre-flight over SSH, before anything starts: each host reachable, auth working, the Docker
//! engine answering through the tunnel where needed, the GPUs asked for present
//! (`nvidia-smi` / `rocm-smi` parsed when present), the ports free. Every host is checked at
//! once and every failure is reported together.

use std::time::Duration;

use futures_util::future::join_all;
use serde::Serialize;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::{ForwardTarget, Pool, Session, quote};
use crate::deploy::GpuRequest;
use crate::hosts::Host;

/// The Docker engine socket on hosts.
pub const DOCKER_SOCKET: &str = "/var/run/docker.sock";

/// What one host must offer, with its entry in the hosts file: the plan's
/// [`HostNeeds`](crate::plan::preflight::HostNeeds) for a [`Host`].
pub type HostCheck = crate::plan::preflight::HostNeeds<Host>;

/// What a host offered.
#[derive(Debug, Clone, Serialize)]
pub struct HostReport {
    pub host: String,
    pub gpus: Vec<GpuInfo>,
    /// `OK` from the engine's `/_ping`, when checked.
    pub docker: Option<String>,
}

/// One GPU as the vendor tool reports it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct GpuInfo {
    pub name: String,
    pub memory_mib: Option<u64>,
}

/// Every failure of a pre-flight, by host.
#[derive(Debug, thiserror::Error)]
#[error("pre-flight failed; nothing was started:{}", list(.failures))]
pub struct PreflightError {
    /// `(host name, problem)`.
    pub failures: Vec<(String, String)>,
}

fn list(failures: &[(String, String)]) -> String {
    failures
        .iter()
        .map(|(host, problem)| format!("\n  {host}: {problem}"))
        .collect()
}

/// Check every host concurrently; report all failures together.
pub async fn preflight(
    pool: &Pool,
    checks: &[HostCheck],
) -> Result<Vec<HostReport>, PreflightError> {
    let results = join_all(checks.iter().map(|check| check_host(pool, check))).await;
    let mut failures = Vec::new();
    let mut reports = Vec::new();
    for (check, result) in checks.iter().zip(results) {
        match result {
            Ok(report) => reports.push(report),
            Err(problems) => {
                failures.extend(problems.into_iter().map(|p| (check.host.name.clone(), p)));
            }
        }
    }
    if failures.is_empty() {
        Ok(reports)
    } else {
        Err(PreflightError { failures })
    }
}

async fn check_host(pool: &Pool, check: &HostCheck) -> Result<HostReport, Vec<String>> {
    let session = pool
        .get(&check.host)
        .await
        .map_err(|e| vec![e.to_string()])?;
    let mut problems = Vec::new();
    let mut report = HostReport {
        host: check.host.name.clone(),
        gpus: Vec::new(),
        docker: None,
    };
    match session.run(TOOLS_QUERY).await {
        Ok(output) if !output.stdout.trim().is_empty() => problems.push(format!(
            "missing on the host: {} (util-linux; needed to run and lock tasks)",
            output
                .stdout
                .split_whitespace()
                .collect::<Vec<_>>()
                .join(", ")
        )),
        Ok(_) => {}
        Err(e) => problems.push(format!("could not run a command: {e}")),
    }
    if check.docker {
        match docker_ping(&session).await {
            Ok(answer) => report.docker = Some(answer),
            Err(problem) => problems.push(problem),
        }
    }
    if let Some(want) = &check.gpus {
        match session.run(GPU_QUERY).await {
            Ok(output) => {
                report.gpus = parse_gpus(&output.stdout);
                if let Some(problem) = gpu_shortfall(want, &report.gpus) {
                    problems.push(problem);
                }
            }
            Err(e) => problems.push(format!("could not list GPUs: {e}")),
        }
    }
    if let Some(want) = check.disk {
        match session.run(&disk_query(check.docker)).await {
            Ok(output) => {
                if let Some(problem) = disk_shortfall(want, &output.stdout) {
                    problems.push(problem);
                }
            }
            Err(e) => problems.push(format!("could not check free disk: {e}")),
        }
    }
    if check.cpus.is_some() || check.memory.is_some() {
        match session.run(SIZE_QUERY).await {
            Ok(output) => problems.extend(size_shortfall(check.cpus, check.memory, &output.stdout)),
            Err(e) => problems.push(format!("could not count CPUs and RAM: {e}")),
        }
    }
    if !check.ports.is_empty() {
        match session.run(&ports_query(&check.ports)).await {
            Ok(output) => {
                for line in output.stdout.lines() {
                    if let Some(port) = line.strip_prefix("busy ") {
                        problems.push(format!("port {port} is already in use"));
                    }
                }
            }
            Err(e) => problems.push(format!("could not check ports: {e}")),
        }
    }
    if problems.is_empty() {
        Ok(report)
    } else {
        Err(problems)
    }
}

/// `GET /_ping` on the engine through a tunnel to its socket.
async fn docker_ping(session: &Session) -> Result<String, String> {
    let tunnel = session
        .forward(ForwardTarget::Unix {
            path: DOCKER_SOCKET.to_string(),
        })
        .await
        .map_err(|e| format!("docker: {e}"))?;
    let exchange = async {
        let mut stream = tokio::net::TcpStream::connect(tunnel.local_addr()).await?;
        stream
            .write_all(b"GET /_ping HTTP/1.0\r\nHost: docker\r\n\r\n")
            .await?;
        let mut answer = Vec::new();
        stream.read_to_end(&mut answer).await?;
        std::io::Result::Ok(String::from_utf8_lossy(&answer).into_owned())
    };
    match tokio::time::timeout(Duration::from_secs(10), exchange).await {
        Ok(Ok(text)) if text.starts_with("HTTP/1.") && text.contains(" 200 ") => Ok(text
            .rsplit("\r\n\r\n")
            .next()
            .unwrap_or("OK")
            .trim()
            .to_string()),
        Ok(Ok(text)) if text.is_empty() => Err(format!(
            "docker engine not reachable at {DOCKER_SOCKET} (no socket, no permission, or \
             AllowStreamLocalForwarding disabled in sshd)"
        )),
        Ok(Ok(text)) => Err(format!(
            "docker engine answered `{}`",
            text.lines().next().unwrap_or_default()
        )),
        Ok(Err(e)) => Err(format!(
            "docker engine not reachable through the tunnel: {e}"
        )),
        Err(_) => Err("docker engine did not answer within 10s".to_string()),
    }
}

/// Prints `AVAILABLE_KIB MOUNT` of the filesystem that holds the Docker root (with Docker)
/// or the login user's home.
fn disk_query(docker: bool) -> String {
    let dir = if docker {
        "d=\"$HOME\"; [ -d /var/lib/docker ] && d=/var/lib/docker"
    } else {
        "d=\"$HOME\""
    };
    format!("{dir}; df -Pk \"$d\" | awk 'NR==2 {{print $4, $6}}'")
}

/// The problem when `df`'s answer (`AVAILABLE_KIB MOUNT`) shows less than `want` bytes free.
fn disk_shortfall(want: u64, stdout: &str) -> Option<String> {
    let mut words = stdout.split_whitespace();
    let free = words
        .next()
        .and_then(|k| k.parse::<u64>().ok())
        .map(|k| k.saturating_mul(1024));
    let mount = words.next().unwrap_or("?");
    let gb = |b: u64| format!("{}GB", crate::units::number(b as f64 / 1e9));
    match free {
        None => Some(format!(
            "could not read free disk from df: `{}`",
            stdout.trim()
        )),
        Some(free) if free < want => Some(format!(
            "needs {} of free disk (resources.disk), has {} free on {mount}",
            gb(want),
            gb(free)
        )),
        Some(_) => None,
    }
}

/// Prints the CPU count, then the RAM in KiB.
const SIZE_QUERY: &str = "nproc; awk '/^MemTotal:/ {print $2}' /proc/meminfo";

/// The problems when `SIZE_QUERY`'s answer shows fewer CPUs or less RAM than asked.
fn size_shortfall(cpus: Option<u32>, memory: Option<u64>, stdout: &str) -> Vec<String> {
    let mut lines = stdout.lines().map(str::trim);
    let have_cpus = lines.next().and_then(|l| l.parse::<u32>().ok());
    let have_memory = lines
        .next()
        .and_then(|l| l.parse::<u64>().ok())
        .map(|k| k.saturating_mul(1024));
    let gb = |b: u64| format!("{}GB", crate::units::number(b as f64 / 1e9));
    let mut out = Vec::new();
    match (cpus, have_cpus) {
        (Some(want), Some(have)) if have < want => {
            out.push(format!("needs {want} CPUs (resources.cpu), has {have}"));
        }
        (Some(_), None) => out.push("could not count CPUs (nproc)".to_string()),
        _ => {}
    }
    match (memory, have_memory) {
        (Some(want), Some(have)) if have < want => out.push(format!(
            "needs {} of RAM (resources.memory), has {}",
            gb(want),
            gb(have)
        )),
        (Some(_), None) => out.push("could not read the RAM size (/proc/meminfo)".to_string()),
        _ => {}
    }
    out
}

/// Prints the names of the tools the provider and the host lock need but the host lacks.
const TOOLS_QUERY: &str =
    "for t in setsid flock; do command -v $t >/dev/null 2>&1 || echo $t; done; true";

pub(crate) const GPU_QUERY: &str = "if command -v nvidia-smi >/dev/null 2>&1; then \
    nvidia-smi --query-gpu=name,memory.total --format=csv,noheader,nounits | sed 's/^/nvidia,/'; fi; \
    if command -v rocm-smi >/dev/null 2>&1; then rocm-smi --showproductname --csv | sed 's/^/amd,/'; fi; true";

/// Lines `nvidia,NAME, MEMORY` and `amd,<rocm-smi csv>` into GPUs.
pub(crate) fn parse_gpus(text: &str) -> Vec<GpuInfo> {
    let mut gpus = Vec::new();
    let mut amd_column = None;
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("nvidia,") {
            let mut fields = rest.split(',').map(str::trim);
            let name = fields.next().unwrap_or_default().to_string();
            let memory_mib = fields.next().and_then(|m| m.parse().ok());
            if !name.is_empty() {
                gpus.push(GpuInfo { name, memory_mib });
            }
        } else if let Some(rest) = line.strip_prefix("amd,") {
            let fields: Vec<&str> = rest.split(',').map(str::trim).collect();
            if fields
                .first()
                .is_some_and(|f| f.eq_ignore_ascii_case("device"))
            {
                amd_column = fields
                    .iter()
                    .position(|f| f.to_ascii_lowercase().contains("series"))
                    .or(Some(1));
                continue;
            }
            if let Some(col) = amd_column
                && fields.first().is_some_and(|f| f.starts_with("card"))
            {
                let name = fields.get(col).unwrap_or(&"AMD GPU").to_string();
                gpus.push(GpuInfo {
                    name,
                    memory_mib: None,
                });
            }
        }
    }
    gpus
}

fn gpu_shortfall(want: &GpuRequest, have: &[GpuInfo]) -> Option<String> {
    let matching = have
        .iter()
        .filter(|g| {
            want.names.is_empty()
                || want.names.iter().any(|n| {
                    g.name
                        .to_ascii_lowercase()
                        .contains(&n.to_ascii_lowercase())
                })
        })
        .count();
    if matching as u32 >= want.count {
        return None;
    }
    let found = if have.is_empty() {
        "no GPU found (neither nvidia-smi nor rocm-smi listed any)".to_string()
    } else {
        let names: Vec<&str> = have.iter().map(|g| g.name.as_str()).collect();
        format!("found {}: {}", have.len(), names.join(", "))
    };
    let what = if want.names.is_empty() {
        "GPU(s)".to_string()
    } else {
        want.names.join("|")
    };
    Some(format!("needs {} {what}, {found}", want.count))
}

/// For each port, `busy N` when something listens on it (from /proc/net/tcp{,6}).
fn ports_query(ports: &[u16]) -> String {
    let list: Vec<String> = ports.iter().map(u16::to_string).collect();
    let script = format!(
        "for p in {}; do h=$(printf ':%04X' \"$p\"); \
         if cat /proc/net/tcp /proc/net/tcp6 2>/dev/null | awk -v h=\"$h\" \
         '$4==\"0A\" && substr($2, length($2)-4)==h {{f=1}} END {{exit !f}}'; \
         then echo \"busy $p\"; fi; done",
        list.join(" ")
    );
    format!("sh -c {}", quote(&script))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fewer_cpus_or_less_ram_than_asked_are_problems() {
        let answer = "8\n16000000\n";
        assert!(size_shortfall(Some(8), Some(16_000_000_000), answer).is_empty());
        assert_eq!(
            size_shortfall(Some(16), Some(64_000_000_000), answer),
            [
                "needs 16 CPUs (resources.cpu), has 8",
                "needs 64GB of RAM (resources.memory), has 16.38GB"
            ]
        );
        assert_eq!(size_shortfall(Some(1), None, "").len(), 1);
    }

    #[test]
    fn free_disk_below_the_request_is_a_problem() {
        assert_eq!(disk_shortfall(100_000_000_000, "200000000 /data\n"), None);
        let p = disk_shortfall(2_000_000_000_000, "1000000 /\n").unwrap();
        assert_eq!(
            p,
            "needs 2000GB of free disk (resources.disk), has 1.02GB free on /"
        );
        assert!(disk_shortfall(1, "df: no such file").is_some());
    }
    use crate::deploy::GpuVendor;

    #[test]
    fn parses_nvidia_and_rocm_listings() {
        let text = "nvidia,NVIDIA H200, 143771\nnvidia,NVIDIA H200, 143771\n\
                    amd,device,Card Series,Card Model,Card Vendor,Card SKU\n\
                    amd,card0,AMD Instinct MI300X,0x74a1,Advanced Micro Devices,M3000100\n";
        let gpus = parse_gpus(text);
        assert_eq!(gpus.len(), 3);
        assert_eq!(gpus[0].name, "NVIDIA H200");
        assert_eq!(gpus[0].memory_mib, Some(143771));
        assert_eq!(gpus[2].name, "AMD Instinct MI300X");
    }

    #[test]
    fn shortfall_names_what_is_missing() {
        let want = GpuRequest {
            count: 8,
            names: vec!["H200".to_string()],
            vendor: GpuVendor::Nvidia,
        };
        let have = parse_gpus("nvidia,NVIDIA H200, 1\n");
        let problem = gpu_shortfall(&want, &have).unwrap();
        assert_eq!(problem, "needs 8 H200, found 1: NVIDIA H200");
        assert!(gpu_shortfall(&want, &vec![have[0].clone(); 8]).is_none());
        assert!(gpu_shortfall(&want, &[]).unwrap().contains("no GPU found"));
    }
}
