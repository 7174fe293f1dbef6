//! Self-contained HTML5 report pages: a verdict card (the answer at a glance),
//! headings, paragraphs, tables, inline SVG charts and preformatted text, with
//! inline CSS; no scripts, nothing fetched. All text given to the builder is
//! escaped; `svg` takes markup from `svg::render`. Blocks appear in the order
//! they are added: a page that has a verdict adds its card first.

use crate::svg::escape;

/// How a verdict card is coloured: the answer is to act, to wait, or not to.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Tone {
    Good,
    #[default]
    Neutral,
    Bad,
}

/// A verdict card: a headline, a few label/value facts and the commands that
/// act on them (each under its caption).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Card {
    pub headline: String,
    pub tone: Tone,
    pub facts: Vec<(String, String)>,
    pub commands: Vec<(String, String)>,
}

enum Block {
    Card(Card),
    Heading(String),
    Paragraph(String),
    Table(Vec<String>, Vec<Vec<String>>),
    Svg(String),
    Pre(String),
}

/// A page built block by block: `Page::new("t").heading("h").svg(chart).render()`.
pub struct Page {
    title: String,
    blocks: Vec<Block>,
}

const CSS: &str =
    "body{font-family:sans-serif;margin:2em auto;max-width:1100px;color:#222;padding:0 1em}\
h1{font-size:1.6em}h2{font-size:1.25em;margin-top:1.6em;border-bottom:1px solid #ddd}\
table{border-collapse:collapse;margin:.6em 0;font-size:.9em}\
th,td{border:1px solid #ccc;padding:.2em .55em;text-align:right}\
th{background:#f2f2f2}td:first-child,th:first-child{text-align:left}\
pre{background:#f7f7f7;padding:.6em;overflow-x:auto;font-size:.85em}\
figure{margin:.8em 0}svg{max-width:100%;height:auto}\
.verdict{border:2px solid #999;border-radius:8px;padding:.4em 1.2em .8em;margin:1em 0 1.8em;background:#f7f7f7}\
.verdict.good{border-color:#2a8a2a;background:#f2faf2}.verdict.bad{border-color:#b8860b;background:#fdf8ec}\
.verdict h2{border:none;margin:.4em 0 .5em;font-size:1.35em}\
.verdict dl{display:grid;grid-template-columns:max-content 1fr;gap:.25em 1.2em;margin:.4em 0}\
.verdict dt{font-weight:bold}.verdict dd{margin:0}\
.verdict p{margin:.7em 0 .2em}.verdict pre{margin:.2em 0;white-space:pre-wrap;word-break:break-all}";

impl Page {
    pub fn new(title: &str) -> Page {
        Page {
            title: title.to_string(),
            blocks: Vec::new(),
        }
    }

    pub fn card(mut self, card: Card) -> Page {
        self.blocks.push(Block::Card(card));
        self
    }

    pub fn heading(mut self, text: &str) -> Page {
        self.blocks.push(Block::Heading(text.to_string()));
        self
    }

    pub fn paragraph(mut self, text: &str) -> Page {
        self.blocks.push(Block::Paragraph(text.to_string()));
        self
    }

    pub fn table<S: AsRef<str>>(mut self, headers: &[S], rows: &[Vec<String>]) -> Page {
        self.blocks.push(Block::Table(
            headers.iter().map(|h| h.as_ref().to_string()).collect(),
            rows.to_vec(),
        ));
        self
    }

    /// An inline SVG element (as made by `svg::render`); inserted as markup.
    pub fn svg(mut self, svg: String) -> Page {
        self.blocks.push(Block::Svg(svg));
        self
    }

    pub fn preformatted(mut self, text: &str) -> Page {
        self.blocks.push(Block::Pre(text.to_string()));
        self
    }

    /// In-place variants for pages built in loops.
    pub fn push_card(&mut self, card: Card) {
        self.blocks.push(Block::Card(card));
    }
    pub fn push_heading(&mut self, text: &str) {
        self.blocks.push(Block::Heading(text.to_string()));
    }
    pub fn push_paragraph(&mut self, text: &str) {
        self.blocks.push(Block::Paragraph(text.to_string()));
    }
    pub fn push_table<S: AsRef<str>>(&mut self, headers: &[S], rows: &[Vec<String>]) {
        self.blocks.push(Block::Table(
            headers.iter().map(|h| h.as_ref().to_string()).collect(),
            rows.to_vec(),
        ));
    }
    pub fn push_svg(&mut self, svg: String) {
        self.blocks.push(Block::Svg(svg));
    }
    pub fn push_preformatted(&mut self, text: &str) {
        self.blocks.push(Block::Pre(text.to_string()));
    }

    /// The whole HTML5 document.
    pub fn render(&self) -> String {
        let mut s = String::new();
        s.push_str("<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n");
        s.push_str("<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n");
        s.push_str(&format!("<title>{}</title>\n", escape(&self.title)));
        s.push_str(&format!("<style>{CSS}</style>\n</head>\n<body>\n"));
        s.push_str(&format!("<h1>{}</h1>\n", escape(&self.title)));
        for b in &self.blocks {
            match b {
                Block::Card(c) => {
                    let tone = match c.tone {
                        Tone::Good => "good",
                        Tone::Neutral => "neutral",
                        Tone::Bad => "bad",
                    };
                    s.push_str(&format!(
                        "<section class=\"verdict {tone}\">\n<h2>{}</h2>\n<dl>\n",
                        escape(&c.headline)
                    ));
                    for (k, v) in &c.facts {
                        s.push_str(&format!("<dt>{}</dt><dd>{}</dd>\n", escape(k), escape(v)));
                    }
                    s.push_str("</dl>\n");
                    for (caption, cmd) in &c.commands {
                        s.push_str(&format!(
                            "<p>{}</p>\n<pre class=\"command\"><code>{}</code></pre>\n",
                            escape(caption),
                            escape(cmd)
                        ));
                    }
                    s.push_str("</section>\n");
                }
                Block::Heading(t) => s.push_str(&format!("<h2>{}</h2>\n", escape(t))),
                Block::Paragraph(t) => s.push_str(&format!("<p>{}</p>\n", escape(t))),
                Block::Pre(t) => s.push_str(&format!("<pre>{}</pre>\n", escape(t))),
                Block::Svg(svg) => s.push_str(&format!("<figure>{svg}</figure>\n")),
                Block::Table(h, rows) => {
                    s.push_str("<table>\n<thead><tr>");
                    for c in h {
                        s.push_str(&format!("<th>{}</th>", escape(c)));
                    }
                    s.push_str("</tr></thead>\n<tbody>\n");
                    for r in rows {
                        s.push_str("<tr>");
                        for c in r {
                            s.push_str(&format!("<td>{}</td>", escape(c)));
                        }
                        s.push_str("</tr>\n");
                    }
                    s.push_str("</tbody>\n</table>\n");
                }
            }
        }
        s.push_str("</body>\n</html>\n");
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::svg;

    #[test]
    fn page_is_a_full_document_with_escaped_text() {
        let chart = svg::Chart {
            title: "c".into(),
            series: vec![svg::Series::new("s", vec![(0.0, 1.0), (1.0, 2.0)])],
            ..Default::default()
        };
        let p = Page::new("Frag <report>")
            .heading("Zone & order")
            .paragraph("a < b")
            .table(
                &["h<1>", "h2"],
                &[
                    vec!["<script>".into(), "2".into()],
                    vec!["x".into(), "y".into()],
                ],
            )
            .svg(svg::render(&chart, 400, 300))
            .preformatted("x > y\n  z");
        let s = p.render();
        assert!(s.starts_with("<!DOCTYPE html>"));
        assert!(s.trim_end().ends_with("</html>"));
        assert!(s.contains("<title>Frag &lt;report&gt;</title>"));
        assert!(s.contains("<h2>Zone &amp; order</h2>"));
        assert!(s.contains("<p>a &lt; b</p>"));
        assert!(s.contains("<th>h&lt;1&gt;</th>"));
        assert!(s.contains("<td>&lt;script&gt;</td>"));
        assert!(!s.contains("<script"));
        assert!(s.contains("<pre>x &gt; y\n  z</pre>"));
        assert_eq!(s.matches("<svg").count(), 1);
        assert_eq!(s.matches("<tr>").count(), 3);
        assert!(!s.contains("http://") || s.matches("http://").count() == 1); // the SVG namespace only
    }

    #[test]
    fn a_verdict_card_comes_where_it_is_added_with_its_facts_and_commands() {
        let s = Page::new("r")
            .card(Card {
                headline: "Put <heap> on 2 MB pages".into(),
                tone: Tone::Good,
                facts: vec![("pages".into(), "512 & more".into())],
                commands: vec![("Apply:".into(), "hugetune run -- ./app 'x'".into())],
            })
            .heading("h")
            .render();
        let card = s.find("<section class=\"verdict good\">").unwrap();
        assert!(card < s.find("<h2>h</h2>").unwrap());
        assert!(s[..card].ends_with("</h1>\n"), "the card follows the title");
        assert!(s.contains("<h2>Put &lt;heap&gt; on 2 MB pages</h2>"));
        assert!(s.contains("<dt>pages</dt><dd>512 &amp; more</dd>"));
        assert!(s.contains(
            "<pre class=\"command\"><code>hugetune run -- ./app &#39;x&#39;</code></pre>"
        ));
    }
}
