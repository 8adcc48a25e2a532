//! Every file the archive writes, read back through the types it was written from: the
//! manifest (with its typed loads, verdicts and process records), each point's summary.json
//! and requests.jsonl, the run-level summary.json and summary.csv, and repro.md. Written from
//! the version-1 fixture's contents, which must still read.

use std::path::Path;

use orchestrate::archive::{
    Archive, Manifest, PointLoad, PointSummary, ProcessRecord, Validity, read_manifest,
    read_point_summary, repro_text,
};
use orchestrate::client::RequestRecord;

const FIXTURE: &str = "tests/fixtures/archive-v1/demo/20261123-223731";

fn fixture() -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(FIXTURE)
}

fn requests(path: &Path) -> Vec<RequestRecord> {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

#[test]
fn the_version_1_fixture_reads_typed() {
    let dir = fixture();
    let m = read_manifest(&dir).unwrap();
    assert_eq!(m.points.len(), 2);
    for p in &m.points {
        assert!(matches!(p.load, PointLoad::Plan(_)), "{:?}", p.load);
        assert!(p.load_plan().is_some());
        assert_eq!(p.verdict().map(|v| v.gates.len()), Some(7));
        let summary = read_point_summary(&dir, &p.dir).unwrap().unwrap();
        assert!(summary.completed.is_some());
        let written: serde_json::Value = serde_json::from_str(
            &std::fs::read_to_string(dir.join("points").join(&p.dir).join("summary.json")).unwrap(),
        )
        .unwrap();
        // A summary read and written again is the same JSON, key order included.
        assert_eq!(
            serde_json::to_string(&summary).unwrap(),
            serde_json::to_string(&written).unwrap()
        );
        assert!(!requests(&dir.join("points").join(&p.dir).join("requests.jsonl")).is_empty());
    }
    // The typed manifest reads back equal from what it writes.
    let again: Manifest = serde_json::from_value(serde_json::to_value(&m).unwrap()).unwrap();
    assert_eq!(again, m);
}

#[test]
fn every_file_written_reads_back_equal() {
    let source = fixture();
    let mut manifest = read_manifest(&source).unwrap();
    manifest.run_id = "20261124-000000".into();
    let results = tempfile::tempdir().unwrap();
    let mut archive = Archive::create(results.path(), manifest.clone()).unwrap();
    let dir = archive.dir().to_path_buf();
    for p in &manifest.points {
        let records = requests(&source.join("points").join(&p.dir).join("requests.jsonl"));
        let mut writer = archive.requests_writer(&p.dir).unwrap();
        for r in &records {
            writer.write(r).unwrap();
        }
        writer.flush().unwrap();
        drop(writer);
        let summary = read_point_summary(&source, &p.dir).unwrap().unwrap();
        archive.write_point_summary(&p.dir, &summary).unwrap();
        let validity = p.validity.clone();
        let index = manifest.points.iter().position(|q| q.dir == p.dir).unwrap();
        archive
            .update(|m| m.points[index].validity = validity)
            .unwrap();

        assert_eq!(
            requests(&dir.join("points").join(&p.dir).join("requests.jsonl")),
            records
        );
        assert_eq!(read_point_summary(&dir, &p.dir).unwrap(), Some(summary));
    }
    archive.write_repro().unwrap();

    let read = read_manifest(&dir).unwrap();
    assert_eq!(&read, archive.manifest());
    assert_eq!(read.points, manifest.points);
    for d in &read.deployments {
        for (key, process) in d.processes() {
            assert_eq!(
                ProcessRecord::from_value(&process.to_value()).as_ref(),
                Some(&process),
                "{key}"
            );
        }
    }
    assert_eq!(
        std::fs::read_to_string(dir.join("repro.md")).unwrap(),
        repro_text(&read)
    );

    // The run-level summary.json: one row per point, its verdict and summary typed.
    let rows: Vec<serde_json::Value> =
        serde_json::from_str(&std::fs::read_to_string(dir.join("summary.json")).unwrap()).unwrap();
    assert_eq!(rows.len(), read.points.len());
    for (row, p) in rows.iter().zip(&read.points) {
        assert_eq!(row["point"], p.id.as_str());
        let validity: Option<Validity> = serde_json::from_value(row["validity"].clone()).unwrap();
        assert_eq!(validity, p.validity);
        let summary: PointSummary = serde_json::from_value(row["summary"].clone()).unwrap();
        assert_eq!(Some(summary), read_point_summary(&dir, &p.dir).unwrap());
    }
    // summary.csv: a header and one row per point, its cells the summary's figures.
    let csv = std::fs::read_to_string(dir.join("summary.csv")).unwrap();
    let lines: Vec<&str> = csv.lines().collect();
    assert_eq!(lines.len(), 1 + read.points.len());
    let header: Vec<&str> = lines[0].split(',').collect();
    let completed = header.iter().position(|h| *h == "completed").unwrap();
    let valid = header.iter().position(|h| *h == "valid").unwrap();
    for (line, p) in lines[1..].iter().zip(&read.points) {
        let cells: Vec<&str> = line.split(',').collect();
        let summary = read_point_summary(&dir, &p.dir).unwrap().unwrap();
        assert_eq!(
            cells[completed].parse::<f64>().ok(),
            summary.completed,
            "{line}"
        );
        assert_eq!(cells[valid], p.validity.as_ref().unwrap().valid.to_string());
    }
}
