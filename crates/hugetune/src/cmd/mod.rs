//! One module per command: argument parsing and rendering; the work is in `pipeline`.

pub mod analyze;
pub mod bench;
pub mod calibrate;
pub mod db;
pub mod demo;
pub mod fragsim;
pub mod machine;
pub mod optimize;
pub mod plan;
pub mod rank;
pub mod record;
pub mod run;
pub mod validate;

use hugetune_model::rank::Prediction;
use hugetune_report::{count, table};

/// The prediction table shared by `analyze` and `optimize`.
pub fn predictions_table(preds: &[Prediction]) -> String {
    let rows: Vec<Vec<String>> = preds
        .iter()
        .map(|p| {
            vec![
                format!("{}{}", p.label, if p.base { "" } else { " *" }),
                if p.hugetlb_1g_pages > 0 {
                    format!("{} + {} x 1 GB", p.hugetlb_pages, p.hugetlb_1g_pages)
                } else {
                    format!("{}", p.hugetlb_pages)
                },
                format!("{}", p.thp_pages),
                count(p.walks as f64),
                count(p.faults as f64),
                format!("{:.1} ms", p.saving_ns / 1e6),
                format!("{:.0}%", p.pmb),
                format!("{:.2}x", p.predicted_speedup),
            ]
        })
        .collect();
    table(
        &[
            "mapping",
            "hugetlb pages",
            "THP pages",
            "TLB walks",
            "faults",
            "saving",
            "PMB",
            "speedup",
        ],
        &rows,
    )
}

pub fn assignments_text(a: &[(hugetune_model::Category, hugetune_model::Backing)]) -> String {
    if a.is_empty() {
        "nothing (run unchanged)".into()
    } else {
        a.iter()
            .map(|(c, b)| format!("{c} → {b}"))
            .collect::<Vec<_>>()
            .join(", ")
    }
}

/// What a plan decision places on huge pages, in words.
pub fn decision_text(d: &hugetune_model::plan::PlanDecision) -> String {
    if d.sites.is_empty() {
        assignments_text(&d.assignments)
    } else {
        hugetune_model::rank::site_label(&d.sites)
    }
}
