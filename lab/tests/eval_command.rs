//! `metapu-lab eval` as users run a long comparison: the splits of one experiment run in
//! separate processes (`--first-split`) and joined with `--merge` give the same
//! episodes and results as one run over all the splits.

use std::path::Path;

use crate::support::{lab, lab_refused, metapu};
use serde_json::Value;

/// A split's index, its episodes and each method's accuracies.
type SplitResult = (u64, Value, Vec<(String, Value)>);

fn split_results(dir: &Path) -> Vec<SplitResult> {
    let text = std::fs::read_to_string(dir.join("results.json")).expect("results.json written");
    let json: Value = serde_json::from_str(&text).expect("results.json is JSON");
    json["runs"]
        .as_array()
        .expect("runs")
        .iter()
        .map(|run| {
            let methods = run["methods"]
                .as_array()
                .expect("methods")
                .iter()
                .map(|m| (m["method"].to_string(), m["accuracies"].clone()))
                .collect();
            (run["split"].as_u64().expect("split index"), run["episodes"].clone(), methods)
        })
        .collect()
}

#[test]
fn splits_run_apart_and_merged_equal_one_run_over_all_splits() {
    let dir = tempfile::tempdir().unwrap();
    let out = |name: &str| dir.path().join(name).to_string_lossy().into_owned();
    // DRE is the one method fast enough for a test; its fit is deterministic.
    let common = ["eval", "--methods", "dre", "--test-size", "20", "--preprocess", "none"];
    let run = |extra: &[&str], name: &str| {
        let mut args: Vec<String> = common.iter().map(|s| s.to_string()).collect();
        args.extend(extra.iter().map(|s| s.to_string()));
        args.extend(["--out".to_string(), out(name)]);
        lab(&args.iter().map(String::as_str).collect::<Vec<_>>())
    };
    run(&["--splits", "2"], "whole");
    run(&["--splits", "1"], "first");
    run(&["--first-split", "1", "--splits", "1"], "second");

    let whole = split_results(&dir.path().join("whole"));
    let second = split_results(&dir.path().join("second"));
    assert_eq!(whole.len(), 2);
    assert_eq!(second.len(), 1);
    assert_eq!(second[0], whole[1], "split 1 run alone draws the same data, episodes and results");
    assert_ne!(whole[0].1, whole[1].1, "the two splits draw different episodes");

    // Given in either order, the two halves join into the whole, in split order.
    lab(&[
        "eval",
        "--merge",
        &out("second/results.json"),
        &out("first/results.json"),
        "--out",
        &out("merged"),
    ]);
    assert_eq!(split_results(&dir.path().join("merged")), whole);

    // A half whose split holds another method would leave the table comparing methods
    // on different splits: refused, with a reason.
    let text = std::fs::read_to_string(dir.path().join("first/results.json")).unwrap();
    let mut other: Value = serde_json::from_str(&text).unwrap();
    other["runs"][0]["methods"][0]["method"] = Value::String("Naive".into());
    std::fs::write(dir.path().join("other.json"), other.to_string()).unwrap();
    let stderr = lab_refused(&[
        "eval",
        "--merge",
        &out("other.json"),
        &out("second/results.json"),
        "--out",
        &out("refused"),
    ]);
    assert!(stderr.contains("every split needs the same methods"), "{stderr}");
}

/// One split of meta-trained methods, small enough for a test.
const QUICK_SPLIT: [&str; 12] = [
    "--splits",
    "1",
    "--k",
    "8",
    "--iterations",
    "60",
    "--eval-every",
    "30",
    "--test-size",
    "20",
    "--preprocess",
    "none",
];

#[test]
fn one_model_per_support_size_scores_every_episode_with_its_own_for_ours_and_np() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().to_string_lossy().into_owned();
    let models = format!("{out}/models");
    let flags = ["--methods", "ours,ours-true-prior,np", "--per-support-size", "--save-models", &models];
    lab(&[&["eval"][..], &QUICK_SPLIT[..], &flags[..], &["--out", &out][..]].concat());
    // Ours' three models are kept, one per N_p, and load as model files.
    for n in [1, 3, 5] {
        let path = dir.path().join(format!("models/split-0-positives-{n}.safetensors"));
        let info = metapu(&["info", &path.to_string_lossy()]);
        assert!(info.contains("features     2"), "{info}");
    }
    let text = std::fs::read_to_string(dir.path().join("results.json")).unwrap();
    let json: Value = serde_json::from_str(&text).unwrap();
    let run = &json["runs"][0];
    let episodes = run["episodes"].as_array().unwrap();
    for n in [1, 3, 5] {
        assert!(episodes.iter().any(|e| e["n_pos"] == n), "target episodes with N_p = {n}");
    }
    for m in run["methods"].as_array().unwrap() {
        let chosen = m["chosen"].as_str().unwrap();
        for n in [1, 3, 5] {
            assert!(chosen.contains(&format!("N_p={n}: K=8")), "{chosen}");
        }
        // Every episode was scored (an episode no model took would be NaN: null in JSON).
        let acc = m["accuracies"].as_array().unwrap();
        assert_eq!(acc.len(), episodes.len());
        assert!(acc.iter().all(|a| a.as_f64().is_some_and(|a| (0.0..=1.0).contains(&a))), "{acc:?}");
        assert!(m.get("best_iteration").is_none(), "three models, no one kept iteration");
        let kept = m["best_iteration_by_positives"].as_object().expect("each model's kept iteration");
        assert_eq!(kept.keys().collect::<Vec<_>>(), ["1", "3", "5"]);
        assert!(kept.values().all(|i| [30, 60].contains(&i.as_u64().unwrap())), "{kept:?}");
    }
    let names: Vec<&str> =
        run["methods"].as_array().unwrap().iter().map(|m| m["method"].as_str().unwrap()).collect();
    assert_eq!(names, ["Ours", "OursTruePrior", "Np"]);
    let ours = &run["methods"][0];
    assert_eq!(ours["method"], "Ours");
    let priors = ours["estimated_priors"].as_array().unwrap();
    assert!(priors.iter().all(|p| p.as_f64().is_some_and(|p| p > 0.0 && p <= 1.0)), "{priors:?}");
}

#[test]
fn an_ensemble_trains_its_members_apart_saves_them_and_scores_the_same_when_reloaded() {
    let dir = tempfile::tempdir().unwrap();
    let out = |name: &str| dir.path().join(name).to_string_lossy().into_owned();
    let run = |extra: &[&str], name: &str| {
        let mut args: Vec<&str> = [&["eval"][..], &QUICK_SPLIT[..]].concat();
        args.extend(extra);
        let target = out(name);
        args.extend(["--out", &target]);
        lab(&args);
        let text = std::fs::read_to_string(dir.path().join(name).join("results.json")).unwrap();
        serde_json::from_str::<Value>(&text).unwrap()["runs"][0].clone()
    };
    let ours = ["--methods", "ours,ours-no-prior"];
    let trained = run(
        &["--methods", "ours,ours-no-prior,np", "--members", "2", "--save-models", &out("models")],
        "trained",
    );
    let files = ["models/split-0.safetensors", "models/split-0-member-1.safetensors"];
    let bytes: Vec<Vec<u8>> = files.iter().map(|f| std::fs::read(dir.path().join(f)).unwrap()).collect();
    assert_ne!(bytes[0], bytes[1], "the members were trained from different seeds");
    for m in [&trained["methods"][0], &trained["methods"][2]] {
        assert_eq!(m["chosen"], "K=8 + K=8", "{}", m["method"]);
        let validation = m["validation_accuracy"].as_f64().unwrap();
        assert!((0.0..=1.0).contains(&validation), "the ensemble's own validation: {validation}");
    }
    // NP's second member takes part too.
    let np_alone = run(&["--methods", "np"], "np-alone");
    assert_eq!(np_alone["methods"][0]["method"], "Np");
    assert_eq!(trained["methods"][2]["method"], "Np");
    assert_ne!(np_alone["methods"][0]["accuracies"], trained["methods"][2]["accuracies"]);

    // Reloaded, the two members give the same episodes, decisions and validation.
    let reloaded = run(&[&ours[..], &["--members-from", &out("models")]].concat(), "reloaded");
    assert_eq!(reloaded["episodes"], trained["episodes"]);
    for (a, b) in reloaded["methods"].as_array().unwrap().iter().zip(trained["methods"].as_array().unwrap()) {
        assert_eq!(a["accuracies"], b["accuracies"], "{}", a["method"]);
        assert_eq!(a["validation_accuracy"], b["validation_accuracy"]);
    }
    // The first member alone decides otherwise: the second one takes part.
    std::fs::create_dir(dir.path().join("first")).unwrap();
    std::fs::write(dir.path().join("first/split-0.safetensors"), &bytes[0]).unwrap();
    let alone = run(&[&ours[..], &["--members-from", &out("first")]].concat(), "alone");
    assert_eq!(alone["episodes"], trained["episodes"]);
    assert_ne!(alone["methods"][0]["accuracies"], trained["methods"][0]["accuracies"]);
    // Validated on the episodes its training validated on, a model alone scores what
    // training recorded: so an ensemble's validation compares with a single model's.
    let info = metapu(&["info", &out("first/split-0.safetensors")]);
    let recorded: f64 = info
        .lines()
        .find_map(|l| l.trim().strip_prefix("\"best_validation_accuracy\": "))
        .and_then(|v| v.trim_end_matches(',').parse().ok())
        .expect("best_validation_accuracy in metapu info");
    let measured = alone["methods"][0]["validation_accuracy"].as_f64().unwrap();
    assert!((measured - recorded).abs() < 1e-9, "{measured} against {recorded}");

    // --calibrate-prior maps ours' estimate by the map chosen on validation, which
    // includes the identity: validation can only rise, the estimates are the map of
    // the uncalibrated ones, and the ablations (no prior, true prior) are untouched.
    let first = out("first");
    let args = [&ours[..], &["--members-from", &first, "--calibrate-prior"]].concat();
    let calibrated = run(&args, "calibrated");
    assert_eq!(calibrated["episodes"], alone["episodes"]);
    let (cal, raw) = (&calibrated["methods"][0], &alone["methods"][0]);
    assert_eq!(cal["method"], "Ours");
    assert!(raw.get("prior_maps").is_none(), "no map without --calibrate-prior");
    let map = &cal["prior_maps"][0];
    let (scale, power) = (map["scale"].as_f64().unwrap(), map["power"].as_f64().unwrap());
    let priors = |m: &Value| -> Vec<f64> {
        m["estimated_priors"].as_array().unwrap().iter().map(|p| p.as_f64().unwrap()).collect()
    };
    for (c, r) in priors(cal).iter().zip(priors(raw)) {
        assert!((c - (scale * r.powf(power)).min(1.0)).abs() < 1e-9, "{c} from {r} by {map}");
    }
    assert!(cal["validation_accuracy"].as_f64().unwrap() >= measured);
    assert!(calibrated["methods"][1].get("prior_maps").is_none());
    assert_eq!(calibrated["methods"][1]["accuracies"], alone["methods"][1]["accuracies"]);
    if scale == 1.0 && power == 1.0 {
        assert_eq!(cal["accuracies"], raw["accuracies"]);
    }

    // --prior-from: the first member's ratios read at the second member's estimate.
    // Ours' estimates become the second's own, w/o π is untouched.
    std::fs::create_dir(dir.path().join("second")).unwrap();
    std::fs::write(dir.path().join("second/split-0.safetensors"), &bytes[1]).unwrap();
    let second = run(&[&ours[..], &["--members-from", &out("second")]].concat(), "second");
    let crossed =
        run(&[&ours[..], &["--members-from", &first, "--prior-from", &out("second")]].concat(), "crossed");
    assert_eq!(crossed["episodes"], alone["episodes"]);
    assert_ne!(priors(&second["methods"][0]), priors(raw), "the two members estimate apart");
    assert_eq!(priors(&crossed["methods"][0]), priors(&second["methods"][0]));
    assert_eq!(crossed["methods"][1]["accuracies"], alone["methods"][1]["accuracies"]);
    let chosen = crossed["methods"][0]["chosen"].as_str().unwrap();
    assert!(chosen.ends_with("prior from 1 other model(s)"), "{chosen}");
    let refused = lab_refused(&[&["eval"][..], &QUICK_SPLIT[..], &["--prior-from", &first]].concat());
    assert!(refused.contains("--members-from"), "{refused}");

    // --fresh-validation: the same targets and decisions, validated on episodes of
    // their own instead of those training kept its checkpoint on.
    let fresh = run(&[&ours[..], &["--members-from", &first, "--fresh-validation", "3"]].concat(), "fresh");
    assert_eq!(fresh["episodes"], alone["episodes"]);
    assert_eq!(fresh["methods"][0]["accuracies"], alone["methods"][0]["accuracies"]);
    let fresh_validation = fresh["methods"][0]["validation_accuracy"].as_f64().unwrap();
    assert!((0.0..=1.0).contains(&fresh_validation), "{fresh_validation}");
    assert!(
        (fresh_validation - recorded).abs() > 1e-9,
        "other episodes, another accuracy: {fresh_validation}"
    );
    let again = run(&[&ours[..], &["--members-from", &first, "--fresh-validation", "3"]].concat(), "again");
    assert_eq!(again["methods"][0]["validation_accuracy"], fresh["methods"][0]["validation_accuracy"]);
    let refused = lab_refused(&[&["eval"][..], &QUICK_SPLIT[..], &["--fresh-validation", "0"]].concat());
    assert!(refused.contains("--fresh-validation"), "{refused}");
}

/// `metapu info`'s provenance of a model file, as JSON.
fn provenance(model: &Path) -> Value {
    let text = metapu(&["info", &model.to_string_lossy()]);
    let json = &text[text.find('{').expect("provenance in metapu info")..];
    serde_json::from_str(json).expect("provenance is JSON")
}

#[test]
fn the_synthetic_ensemble_script_trains_each_member_once_and_tables_ours_beside_np() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("rerun");
    let script = crate::support::repo().join("scripts/synthetic-ensemble.sh");
    // A budget of two iterations: the pipeline, not the figures.
    let run = || {
        let result = std::process::Command::new("bash")
            .arg(&script)
            .arg(&out)
            .env("METAPU", crate::support::metapu_binary())
            .env("LAB", crate::support::lab_binary())
            .env("ITERATIONS", "2")
            .env("SPLITS", "1")
            .env("JOBS", "2")
            .output()
            .expect("bash runs");
        let text =
            String::from_utf8_lossy(&result.stdout).into_owned() + &String::from_utf8_lossy(&result.stderr);
        assert!(result.status.success(), "scripts/synthetic-ensemble.sh failed: {text}");
        text
    };
    let first = run();
    assert!(first.contains("6 jobs"), "{first}");

    // The members: budgets, training seeds 1000·S + m (S = 1), the data of split 1 and
    // the weight α of the true-prior risk (in the job list: the model file records
    // neither α nor β).
    let jobs = std::fs::read_to_string(out.join("logs/jobs.txt")).expect("the job list is kept");
    let members = [("a1-m0", 1000, "1"), ("a1-m1", 1001, "1"), ("a3-m0", 1000, "3"), ("a3-m1", 1001, "3")];
    let mut shas = Vec::new();
    for (member, seed, alpha) in members.into_iter().chain([("a10-m0", 1000, "10")]) {
        let p = provenance(&out.join(format!("models/{member}/split-1.safetensors")));
        assert_eq!(p["seed"], seed, "{member}: {p}");
        assert_eq!(p["iterations"], 2, "{member}: {p}");
        shas.push(p["data_sha256"].clone());
        let job = jobs.lines().find(|l| l.starts_with(&format!("{member}-s1|"))).expect(member);
        assert!(job.contains(&format!(" --true-prior-risk-weight {alpha} --seed {seed} ")), "{job}");
    }
    assert!(shas.windows(2).all(|w| w[0] == w[1]), "every member trained on split 1's data: {shas:?}");

    // The table: ours' five-member ensemble and NP's two on the same target episodes.
    let json = |name: &str| -> Value {
        let text =
            std::fs::read_to_string(out.join(name).join("results.json")).expect("results.json written");
        serde_json::from_str(&text).expect("results.json is JSON")
    };
    let (table, ours) = (json("table"), json("ours-s1"));
    let split = &table["runs"][0];
    assert_eq!(split["split"], 1);
    assert_eq!(split["episodes"], ours["runs"][0]["episodes"]);
    let method = |name: &str| {
        split["methods"].as_array().unwrap().iter().find(|m| m["method"] == name).cloned().expect(name)
    };
    let chosen = method("Ours")["chosen"].as_str().unwrap().to_owned();
    assert_eq!(chosen.matches("K=32").count(), 5, "{chosen}");
    assert_eq!(method("Ours")["accuracies"], ours["runs"][0]["methods"][0]["accuracies"]);
    assert_eq!(method("Np")["chosen"].as_str().unwrap().matches("K=32").count(), 2);
    assert!(first.contains("| NP |") && first.contains("Ours: "), "{first}");

    // A second run trains and scores nothing and gives the same table.
    let before = split_results(&out.join("table"));
    let second = run();
    assert_eq!(second.matches(": kept ").count(), 6 + 2, "{second}");
    assert_eq!(split_results(&out.join("table")), before);
}
