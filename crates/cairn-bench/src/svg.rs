//! `--svg DIR`: one bar chart per suite (plotters, SVG backend only).
//!
//! Rows have different units, so each bar shows an engine's figure relative
//! to the best engine of its row (1 = the best; for µs and MiB rows the
//! inverse), with the figure itself printed at the end of the bar. Text is
//! written as SVG `<text>` elements that the viewer renders: plotters is
//! built without its font features (`ttf`, `ab_glyph`), so no system font is
//! read and layout uses plotters' built-in width estimate.

use std::path::{Path, PathBuf};

use plotters::backend::SVGBackend;
use plotters::prelude::*;

use crate::engine::{EngineKind, Res};
use crate::report::{fmt_num, SuiteResults};

/// One colour per engine, in [`EngineKind::ALL`] order, then bbolt's.
const PALETTE: [RGBColor; 8] = [
    RGBColor(0xd6, 0x5f, 0x0e), // CairnDB
    RGBColor(0x1f, 0x77, 0xb4),
    RGBColor(0x2c, 0xa0, 0x2c),
    RGBColor(0x94, 0x67, 0xbd),
    RGBColor(0x8c, 0x56, 0x4b),
    RGBColor(0x7f, 0x7f, 0x7f),
    RGBColor(0x17, 0xbe, 0xcf),
    RGBColor(0xbc, 0xbd, 0x22),
];

fn colour(e: EngineKind) -> RGBColor {
    let i = EngineKind::ALL
        .iter()
        .position(|k| *k == e)
        .unwrap_or(PALETTE.len() - 1);
    PALETTE[i.min(PALETTE.len() - 1)]
}

fn err(e: impl std::fmt::Display) -> Box<dyn std::error::Error + Send + Sync> {
    format!("writing the SVG chart: {e}").into()
}

fn shorten(s: &str, max: usize) -> String {
    if s.chars().count() <= max {
        s.to_string()
    } else {
        let mut t: String = s.chars().take(max - 1).collect();
        t.push('…');
        t
    }
}

/// Writes `dir/suite-<name>.svg` for one suite; returns its path.
pub fn write_suite(
    dir: &Path,
    name: &str,
    title: &str,
    res: &SuiteResults,
    engines: &[EngineKind],
) -> Res<PathBuf> {
    std::fs::create_dir_all(dir)?;
    let path = dir.join(format!("suite-{}.svg", name.to_lowercase()));
    let bar_h = 11i32;
    let gap = 10i32;
    let rows: Vec<_> = res
        .rows
        .iter()
        .filter(|r| engines.iter().any(|e| res.median(&r.id, *e).is_some()))
        .collect();
    let group_h = bar_h * engines.len().max(1) as i32 + gap;
    let (left, right, top) = (470i32, 150i32, 70i32);
    let width = 1300i32;
    let plot_w = width - left - right;
    let legend_h = 30i32;
    let height = top + group_h * rows.len().max(1) as i32 + legend_h + 40;
    {
        let root = SVGBackend::new(&path, (width as u32, height as u32)).into_drawing_area();
        root.fill(&WHITE).map_err(err)?;
        let font = |size: i32| ("sans-serif", size).into_font();
        root.draw(&Text::new(title.to_string(), (12, 12), font(18)))
            .map_err(err)?;
        root.draw(&Text::new(
            "Bar: the engine's figure relative to the best engine of the row (1 = best; \
             µs and MiB rows inverted). Label: the figure itself (median)."
                .to_string(),
            (12, 38),
            font(12).color(&RGBColor(0x55, 0x55, 0x55)),
        ))
        .map_err(err)?;
        // Grid lines at 0, 0.25, …, 1.
        let y_end = top + group_h * rows.len() as i32;
        for q in 0..=4 {
            let x = left + plot_w * q / 4;
            let c = if q == 4 {
                RGBColor(0x99, 0x99, 0x99)
            } else {
                RGBColor(0xdd, 0xdd, 0xdd)
            };
            root.draw(&PathElement::new(vec![(x, top - 6), (x, y_end)], c))
                .map_err(err)?;
            root.draw(&Text::new(
                format!("{:.2}", q as f64 / 4.0),
                (x - 10, y_end + 4),
                font(11),
            ))
            .map_err(err)?;
        }
        for (i, row) in rows.iter().enumerate() {
            let y0 = top + group_h * i as i32;
            let medians: Vec<(EngineKind, f64)> = engines
                .iter()
                .filter_map(|&e| res.median(&row.id, e).map(|m| (e, m)))
                .filter(|(_, m)| m.is_finite())
                .collect();
            let best = if row.unit.higher_is_better() {
                medians.iter().map(|(_, m)| *m).fold(0.0, f64::max)
            } else {
                medians
                    .iter()
                    .map(|(_, m)| *m)
                    .filter(|m| *m > 0.0)
                    .fold(f64::INFINITY, f64::min)
            };
            root.draw(&Text::new(
                shorten(&row.label, 78),
                (8, y0 + (group_h - gap) / 2 - 6),
                font(11),
            ))
            .map_err(err)?;
            for (j, &e) in engines.iter().enumerate() {
                let Some(&(_, m)) = medians.iter().find(|(k, _)| *k == e) else {
                    continue;
                };
                let rel = if row.unit.higher_is_better() {
                    if best > 0.0 {
                        m / best
                    } else {
                        0.0
                    }
                } else if m > 0.0 && best.is_finite() {
                    best / m
                } else {
                    0.0
                };
                let by = y0 + bar_h * j as i32;
                let bw = ((plot_w as f64) * rel.clamp(0.0, 1.0)).round() as i32;
                root.draw(&Rectangle::new(
                    [(left, by + 1), (left + bw.max(1), by + bar_h - 1)],
                    colour(e).filled(),
                ))
                .map_err(err)?;
                root.draw(&Text::new(
                    format!("{} {}", fmt_num(m), row.unit.label()),
                    (left + bw.max(1) + 4, by),
                    font(10),
                ))
                .map_err(err)?;
            }
        }
        // Legend.
        let ly = y_end + 24;
        let mut x = left;
        for &e in engines {
            root.draw(&Rectangle::new(
                [(x, ly), (x + 12, ly + 12)],
                colour(e).filled(),
            ))
            .map_err(err)?;
            root.draw(&Text::new(e.title().to_string(), (x + 16, ly), font(12)))
                .map_err(err)?;
            x += 24 + 9 * e.title().len() as i32;
        }
        root.present().map_err(err)?;
    }
    Ok(path)
}
