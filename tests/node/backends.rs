//! Which GPU backend wattsond drives a node with: `[gpu] backend = "auto"` on an AMD node whose
//! NVIDIA library is installed but whose driver is not (the fake NVML without its directory).

use wattson_harness::node as common;
use wattson_harness::vendor::Vendor;

use common::Node;
use wattson_types::energy::Method;

#[test]
fn auto_drives_an_amd_node_through_rocm_smi_and_nvml_alone_refuses_it() {
    let mut node = Node::gpus_of(Vendor::Amd, 2);
    let text = std::fs::read_to_string(&node.config).unwrap();
    let auto = format!(
        "backend = \"auto\"\nnvml_library = {:?}\namd_library = {:?}\n",
        Vendor::Nvidia.library(),
        Vendor::Amd.library()
    );
    std::fs::write(&node.config, text.replace(&Vendor::Amd.gpu_lines(), &auto)).unwrap();
    node.start();
    assert!(node.log().contains("ROCm SMI"), "{}", node.log());
    let spec = fake_nvml::Config::load(node.sim.dir()).unwrap().spec(1).unwrap();
    assert_eq!(node.gpu_uuid(1), Vendor::Amd.uuid(&spec.uuid));
    node.sim.set_load(1, 0.8).unwrap();
    let begin = node.begin("1", 1000, "1");
    std::thread::sleep(std::time::Duration::from_millis(600));
    let end = node.end("1");
    let record = node.record("1");
    assert_eq!(record.method(), Some(Method::Counter));
    common::assert_exact(&node, &record, begin, end, 0.001);
    node.stop();

    // The same node told to use NVML only: it does not start, and says why.
    let nvml = node.config_with("nvml.toml", "backend = \"auto\"", "backend = \"nvml\"");
    let out = node.daemon_refusing(&nvml);
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && said.contains("NVML"), "{said}");
}
