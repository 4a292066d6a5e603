//! Bounded fuzzing of every parser that reads input a user or a file controls: the socket's
//! request decoder, the configuration, the sbatch hint options and the simulator's trace
//! reader. Each runs a fixed number of generated cases (proptest; the same cases on every run
//! unless PROPTEST_CASES or a failure file says otherwise) and checks that the parser returns
//! an error instead of panicking, and that what it accepts satisfies its own rules.

use proptest::prelude::*;

use wattson_protocol::{MAX_REQUEST_BYTES, Request, parse_request};
use wattson_slurm::hints::{OPTIONS, SubmitHints};
use wattson_types::job::Hints;

/// Text that looks like the protocol often enough to reach deep into the decoder.
fn request_like() -> impl Strategy<Value = String> {
    let op = prop_oneof![
        prop::sample::select(vec!["status", "job_begin", "job_end", "job_settings", "acct"])
            .prop_map(String::from),
        "[a-z_]{0,12}",
    ];
    let value = prop_oneof![
        Just("null".to_string()),
        any::<i64>().prop_map(|n| n.to_string()),
        any::<f64>().prop_map(|x| x.to_string()),
        "\"[ -~]{0,16}\"",
        Just("{\"job_id\":1,\"step\":\"\"}".to_string()),
        Just("[0,1]".to_string()),
        Just("{}".to_string()),
    ];
    let field = ("[a-z_]{1,10}", value).prop_map(|(k, v)| format!("\"{k}\":{v}"));
    (op, prop::collection::vec(field, 0..6), any::<bool>()).prop_map(|(op, fields, newline)| {
        let mut line = format!("{{\"op\":\"{op}\"");
        for f in fields {
            line.push(',');
            line.push_str(&f);
        }
        line.push('}');
        if newline {
            line.push('\n');
        }
        line
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2000, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn the_request_decoder_never_panics_and_accepts_only_lines(line in prop_oneof![request_like(), ".{0,200}"]) {
        if let Ok(request) = parse_request(&line) {
            prop_assert!(line.ends_with('\n') && line.len() <= MAX_REQUEST_BYTES);
            // What is accepted is a request that encodes back to the same kind.
            let again = serde_json::to_string(&request).unwrap();
            let back: Request = serde_json::from_str(&again).unwrap();
            prop_assert_eq!(std::mem::discriminant(&back), std::mem::discriminant(&request));
        }
    }

    #[test]
    fn the_configuration_parser_never_panics(
        text in prop_oneof![
            ".{0,300}",
            (prop_oneof![Just("[daemon]"), Just("[policy]"), Just("[engine]"), Just("[metrics]"), Just("[prices]")],
             "[a-z_]{1,16}", "[ -~]{0,24}")
                .prop_map(|(section, key, value)| format!("{section}\n{key} = {value}\n")),
        ]
    ) {
        let _ = wattson_config::Config::parse(&text, "fuzz.toml");
    }

    #[test]
    fn accepted_hints_are_always_valid(
        option in prop_oneof![
            prop::sample::select(OPTIONS.iter().map(|o| o.name).collect::<Vec<_>>()).prop_map(str::to_string),
            "[a-z-]{0,16}",
        ],
        value in prop_oneof![".{0,160}", any::<f64>().prop_map(|x| x.to_string()), "[0-9]{1,4}[smhd]"],
    ) {
        let mut hints = SubmitHints::default();
        if hints.set(&option, &value).is_ok() {
            prop_assert!(hints.hints.validate().is_ok(), "accepted {option}={value:?} into invalid hints");
            let tag_ok = hints.hints.tag.as_deref().is_none_or(|t| !t.contains(',') && !t.contains('='));
            prop_assert!(tag_ok);
        }
        // The environment path agrees with the option path.
        let entry = format!("_SLURM_SPANK_OPTION_wattson_{}={value}", option.replace('-', "_"));
        let from_env = SubmitHints::from_env([entry.as_str()], []);
        if let Ok((h, _)) = from_env {
            prop_assert!(h.hints.validate().is_ok());
        }
        let mut direct = Hints { tag: Some(value.clone()), ..Hints::default() };
        if direct.validate().is_ok() {
            direct.normalize();
            prop_assert!(direct.validate().is_ok());
        }
    }

    #[test]
    fn a_gpu_request_is_rewritten_to_shards_only_from_whole_gpus_the_site_shares(
        per_node in prop_oneof![".{0,40}", "(gres[:/])?(gpu|shard|mps|nvme)(:[a-z0-9]{0,5}){0,3}"],
        per_job in prop::option::of("(gres[:/])?(gpu|license)(:[a-z0-9]{0,4}){0,2}"),
        nodes in prop::sample::select(vec![0u32, 1, 2, 0xffff_fffe]),
        tasks in prop::sample::select(vec![0u32, 1, 2, 3, 0xffff_fffe]),
        most_gpus in 1u32..4,
        one_task_per_sharing in any::<bool>(),
    ) {
        use wattson_slurm::shards::{GpuRequest, ShareRule, rewrite};
        let request = GpuRequest {
            tres_per_node: Some(per_node.as_str()),
            tres_per_job: per_job.as_deref(),
            min_nodes: nodes,
            max_nodes: nodes,
            num_tasks: tasks,
            ..GpuRequest::default()
        };
        let rule = ShareRule { shards: Some(3), most_gpus, one_task_per_sharing };
        if let Ok(r) = rewrite(&request, rule) {
            // Each whole GPU became 3 shards (per node for one GPU, per task, one task per GPU,
            // for several), and nothing else names a GPU.
            prop_assert!(r.gpus >= 1 && r.gpus <= most_gpus, "{per_node:?} -> {r:?}");
            if r.gpus == 1 {
                prop_assert!(r.tres_per_node.ends_with("shard:3") && r.tres_per_task.is_none(), "{per_node:?} -> {r:?}");
            } else {
                prop_assert!(one_task_per_sharing && nodes == 1 && tasks == r.gpus, "{per_node:?} -> {r:?}");
                prop_assert_eq!(r.tres_per_task.as_deref(), Some("gres/shard:3"));
            }
            let names_gpu = r.tres_per_node.split(',').any(|item| {
                let name = item.trim().trim_start_matches("gres:").trim_start_matches("gres/");
                name == "gpu" || name.starts_with("gpu:")
            });
            prop_assert!(!names_gpu, "{per_node:?} -> {r:?}");
            prop_assert!(nodes != 2);
        }
    }

    #[test]
    fn the_trace_reader_never_panics(
        text in prop_oneof![
            ".{0,300}",
            prop::collection::vec(
                (any::<i32>(), any::<i16>(), any::<i32>(), "[a-z0-9]{0,8}")
                    .prop_map(|(s, g, d, t)| format!("{s},{g},{d},{t}")),
                0..20,
            )
            .prop_map(|rows| format!("submit,gpus,duration,tag\n{}\n", rows.join("\n"))),
        ]
    ) {
        for format in [wattson_sim::trace::TraceFormat::Auto, wattson_sim::trace::TraceFormat::Generic] {
            if let Ok(jobs) = wattson_sim::trace::parse(&text, "fuzz.csv", format) {
                for job in jobs {
                    prop_assert!(job.gpus > 0, "{job:?}");
                }
            }
        }
    }
}
