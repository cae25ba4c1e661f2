//! The patch construction bench (divan; `cargo bench -p nodegate-scale`):
//! building the conditional untaint JSON patch of semantics.md §5.4 for one
//! node and serializing it to the bytes that go on the wire, as the writer
//! does for every gate it opens. Not run by `tests/run`.

use divan::{Bencher, black_box};
use nodegate::cluster::patch;
use nodegate_core::gate::{IndexedTaint, OpenedBy, UntaintPatch};
use nodegate_core::vocab::model::Taint;

fn main() {
    divan::main();
}

fn untaint_patch(taints: usize) -> UntaintPatch {
    UntaintPatch {
        node: "bench-00042".into(),
        resource_version: "1234567".into(),
        taints: (0..taints)
            .rev()
            .map(|i| IndexedTaint {
                index: i,
                taint: Taint::new(format!("nodegate.dev/initializing-{i}"), "", "NoSchedule"),
            })
            .collect(),
        opened_by: OpenedBy::Ready,
        opened_at: jiff::Timestamp::now(),
        annotations_present: true,
        clear_replace_request: false,
        cordoned: false,
    }
}

/// One managed taint (the usual case) and three.
#[divan::bench(args = [1, 3])]
fn untaint_patch_to_bytes(bencher: Bencher, taints: usize) {
    let p = untaint_patch(taints);
    bencher.bench(|| {
        let body = patch::untaint(black_box(&p));
        black_box(serde_json::to_vec(&body))
    });
}
