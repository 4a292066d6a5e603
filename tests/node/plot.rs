//! `wattson acct --plot`: a job's GPU power with every setting wattson gave its GPU marked,
//! checked as an image. A node whose models probe an unknown workload at several power limits
//! (each a setting, each a different power) before settling.

use wattson_harness::node as common;

use std::time::{Duration, Instant};

use common::{Node, assert_ok};

/// The chart's size and margins, in whole pixels.
const W: usize = wattson_chart::W as usize;
const H: usize = wattson_chart::H as usize;
const L: usize = wattson_chart::L as usize;
const R: usize = wattson_chart::R as usize;
const T: usize = wattson_chart::T as usize;
const B: usize = wattson_chart::B as usize;

#[test]
fn the_plot_shows_each_power_level_and_each_setting_where_it_happened() {
    let node = Node::with_sections(
        fake_nvml::Config::uniform("H100", 1),
        "100ms",
        "",
        "probe_window = \"1s\"\nprobe_settle = \"200ms\"\npower_limit_step_w = 5\n",
    );
    // A point of the power series every 200 ms (the default keeps one per 10 s).
    let text = std::fs::read_to_string(&node.config).unwrap();
    std::fs::write(&node.config, text.replace("[daemon]\n", "[daemon]\nseries_interval = \"200ms\"\n"))
        .unwrap();
    node.sim.set_workload(0, Some(fake_nvml::Workload { t0_s: 0.02, d_s_mhz: 158.4 })).unwrap();
    node.sim.set_load(0, 1.0).unwrap();
    let mut node = node;
    node.start();
    let begin = ["job", "begin", "--job", "1", "--uid", "0", "--gpus", "0", "--energy", "min-energy"];
    assert_ok(&node.wattson(&[&begin[..], &["--energy-slowdown", "10", "--energy-tag", "bert"]].concat()));
    let deadline = Instant::now() + Duration::from_secs(40);
    while node.record("1").dvfs.and_then(|d| d.setting).is_none() {
        assert!(Instant::now() < deadline, "never settled: {}", node.log());
        std::thread::sleep(Duration::from_millis(100));
    }
    std::thread::sleep(Duration::from_secs(1));
    node.end("1");
    let record = node.record("1");
    let settings = record.gpus[0]
        .meter
        .events
        .iter()
        .filter(|e| matches!(e, wattson_types::energy::MeterEvent::Setting { .. }))
        .count();
    assert!(settings >= 3, "the probes and the setting are recorded: {:?}", record.gpus[0].meter.events);

    let png_path = node.dir.path().join("job.png");
    let out = node.wattson(&["acct", "-j", "1", "--local", "--plot", png_path.to_str().unwrap()]);
    assert_ok(&out);
    let decoder = png::Decoder::new(std::io::BufReader::new(std::fs::File::open(&png_path).unwrap()));
    let mut reader = decoder.read_info().unwrap();
    let mut buf = vec![0; reader.output_buffer_size().unwrap()];
    let info = reader.next_frame(&mut buf).unwrap();
    assert_eq!((info.width as usize, info.height as usize), (W, H));
    let channels = info.line_size / info.width as usize;
    let px = |x: usize, y: usize| {
        let at = (y * W + x) * channels;
        (i32::from(buf[at]), i32::from(buf[at + 1]), i32::from(buf[at + 2]))
    };
    // The title is drawn (scripts/install-deps installs a font; without one the PNG has none).
    let dark = (0..W).flat_map(|x| (8..32).map(move |y| (x, y))).filter(|&(x, y)| px(x, y).0 < 100).count();
    assert!(dark > 50, "no title text: {}", String::from_utf8_lossy(&out.stderr));
    // Setting marks: dashed grey (#555) verticals across the plot area; a run of neighbouring
    // columns is one mark (anti-aliasing spreads a line over two).
    let greyish =
        |(r, g, b): (i32, i32, i32)| (r - g).abs() < 8 && (g - b).abs() < 8 && (40..200).contains(&r);
    let columns: Vec<usize> =
        (L + 2..W - R - 1).filter(|&x| (T..H - B).filter(|&y| greyish(px(x, y))).count() > 100).collect();
    let marks = columns.iter().enumerate().filter(|&(i, &x)| i == 0 || columns[i - 1] + 1 != x).count();
    // The first mark (the job's begin) sits on the frame's left edge.
    assert!(marks + 1 >= settings.min(4), "{marks} marks drawn for {settings} settings");
    // The power trace (#1f77b4): at several heights, one per limit probed.
    let blue = |(r, g, b): (i32, i32, i32)| b > r + 60 && b > g + 20;
    let mut rows: Vec<usize> =
        (L + 2..W - R - 1).filter_map(|x| (T..H - B).find(|&y| blue(px(x, y)))).map(|y| y / 4).collect();
    rows.sort_unstable();
    rows.dedup();
    assert!(rows.len() >= 3, "the trace shows the probed power levels: rows {rows:?}");
}
