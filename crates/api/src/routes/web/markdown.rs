//! The agent's Markdown as HTML, safely: `pulldown-cmark` parses (CommonMark with tables and
//! strikethrough) and this module writes every tag itself, from a closed list. Text is escaped;
//! raw HTML in the Markdown is shown as the text it is; a link is its text followed by its
//! destination as text (never an `href`: the only links on a page are the ones Warden built);
//! an image is its description and address as text (nothing is loaded); headings are all `h3`
//! (the agent's text sits under the page's own `h2`); a fenced code block is highlighted by
//! [`super::code`]. This is the one place in the console that writes HTML by hand.

use maud::{Markup, PreEscaped, Render};
use pulldown_cmark::{CodeBlockKind, Event, Options, Parser, Tag, TagEnd};

/// `text` (the agent's Markdown) as markup, in a `div.md`.
pub(super) fn render(text: &str) -> Markup {
    let mut out = String::with_capacity(text.len() * 3 / 2 + 16);
    out.push_str("<div class=\"md\">");
    let mut writer = Writer {
        out,
        destinations: Vec::new(),
        code: None,
        in_head: false,
    };
    let options = Options::ENABLE_TABLES | Options::ENABLE_STRIKETHROUGH;
    for event in Parser::new_ext(text, options) {
        writer.event(event);
    }
    let mut out = writer.out;
    out.push_str("</div>");
    PreEscaped(out)
}

struct Writer {
    out: String,
    /// Open links and images: their destination and where their text starts in `out`.
    destinations: Vec<(String, usize)>,
    /// An open code block: its language and text so far.
    code: Option<(String, String)>,
    /// In a table's head row (cells are `th`).
    in_head: bool,
}

impl Writer {
    fn text(&mut self, text: &str) {
        text.render_to(&mut self.out);
    }

    fn tag(&mut self, tag: &str) {
        self.out.push_str(tag);
    }

    fn event(&mut self, event: Event<'_>) {
        if let Some((_, code)) = &mut self.code {
            match event {
                Event::Text(text) => code.push_str(&text),
                Event::End(TagEnd::CodeBlock) => {
                    if let Some((language, code)) = self.code.take() {
                        super::code::block(&language, &code).render_to(&mut self.out);
                    }
                }
                _ => {}
            }
            return;
        }
        match event {
            Event::Start(tag) => self.start(tag),
            Event::End(end) => self.end(end),
            Event::Text(text) => self.text(&text),
            Event::Code(text) | Event::InlineMath(text) | Event::DisplayMath(text) => {
                self.tag("<code>");
                self.text(&text);
                self.tag("</code>");
            }
            // Raw HTML is shown as the text it is.
            Event::Html(text) | Event::InlineHtml(text) => self.text(&text),
            Event::FootnoteReference(name) => self.text(&format!("[^{name}]")),
            Event::SoftBreak => self.tag("\n"),
            Event::HardBreak => self.tag("<br>"),
            Event::Rule => self.tag("<hr>"),
            Event::TaskListMarker(done) => self.text(if done { "[x] " } else { "[ ] " }),
        }
    }

    fn start(&mut self, tag: Tag<'_>) {
        match tag {
            Tag::Paragraph => self.tag("<p>"),
            Tag::Heading { .. } => self.tag("<h3>"),
            Tag::BlockQuote(_) => self.tag("<blockquote>"),
            Tag::CodeBlock(kind) => {
                let language = match kind {
                    CodeBlockKind::Fenced(info) => info.to_string(),
                    CodeBlockKind::Indented => String::new(),
                };
                self.code = Some((language, String::new()));
            }
            Tag::HtmlBlock => self.tag("<p class=\"html\">"),
            Tag::List(Some(1)) => self.tag("<ol>"),
            Tag::List(Some(start)) => self.tag(&format!("<ol start=\"{start}\">")),
            Tag::List(None) => self.tag("<ul>"),
            Tag::Item => self.tag("<li>"),
            Tag::Table(_) => self.tag("<div class=\"scroll\"><table>"),
            Tag::TableHead => {
                self.in_head = true;
                self.tag("<thead><tr>");
            }
            Tag::TableRow => self.tag("<tr>"),
            Tag::TableCell => self.tag(if self.in_head { "<th>" } else { "<td>" }),
            Tag::Emphasis => self.tag("<em>"),
            Tag::Strong => self.tag("<strong>"),
            Tag::Strikethrough => self.tag("<del>"),
            Tag::Superscript => self.tag("<sup>"),
            Tag::Subscript => self.tag("<sub>"),
            Tag::Link { dest_url, .. } => {
                self.destinations
                    .push((dest_url.to_string(), self.out.len()));
            }
            Tag::Image { dest_url, .. } => {
                self.tag("<span class=\"image\">");
                self.text("image: ");
                self.destinations
                    .push((dest_url.to_string(), self.out.len()));
            }
            Tag::FootnoteDefinition(name) => {
                self.tag("<div class=\"footnote\">");
                self.text(&format!("[^{name}]: "));
            }
            Tag::DefinitionList => self.tag("<dl>"),
            Tag::DefinitionListTitle => self.tag("<dt>"),
            Tag::DefinitionListDefinition => self.tag("<dd>"),
            Tag::MetadataBlock(_) => self.tag("<pre>"),
        }
    }

    fn end(&mut self, end: TagEnd) {
        match end {
            TagEnd::Paragraph | TagEnd::HtmlBlock => self.tag("</p>"),
            TagEnd::Heading(_) => self.tag("</h3>"),
            TagEnd::BlockQuote(_) => self.tag("</blockquote>"),
            TagEnd::CodeBlock => {}
            TagEnd::List(true) => self.tag("</ol>"),
            TagEnd::List(false) => self.tag("</ul>"),
            TagEnd::Item => self.tag("</li>"),
            TagEnd::Table => self.tag("</tbody></table></div>"),
            TagEnd::TableHead => {
                self.in_head = false;
                self.tag("</tr></thead><tbody>");
            }
            TagEnd::TableRow => self.tag("</tr>"),
            TagEnd::TableCell => self.tag(if self.in_head { "</th>" } else { "</td>" }),
            TagEnd::Emphasis => self.tag("</em>"),
            TagEnd::Strong => self.tag("</strong>"),
            TagEnd::Strikethrough => self.tag("</del>"),
            TagEnd::Superscript => self.tag("</sup>"),
            TagEnd::Subscript => self.tag("</sub>"),
            TagEnd::Link => self.destination(),
            TagEnd::Image => {
                self.destination();
                self.tag("</span>");
            }
            TagEnd::FootnoteDefinition => self.tag("</div>"),
            TagEnd::DefinitionList => self.tag("</dl>"),
            TagEnd::DefinitionListTitle => self.tag("</dt>"),
            TagEnd::DefinitionListDefinition => self.tag("</dd>"),
            TagEnd::MetadataBlock(_) => self.tag("</pre>"),
        }
    }

    /// After a link's or image's text: its destination, as text, unless the text was it.
    fn destination(&mut self) {
        let Some((destination, start)) = self.destinations.pop() else {
            return;
        };
        let mut escaped = String::new();
        destination.as_str().render_to(&mut escaped);
        if destination.is_empty() || self.out.get(start..) == Some(escaped.as_str()) {
            return;
        }
        self.tag(" <span class=\"mono dest\">(");
        self.out.push_str(&escaped);
        self.tag(")</span>");
    }
}

#[cfg(test)]
mod tests {
    use super::render;

    fn check(markdown: &str, html: &str) {
        let rendered = render(markdown).into_string();
        let inner = rendered
            .strip_prefix("<div class=\"md\">")
            .and_then(|r| r.strip_suffix("</div>"))
            .unwrap();
        assert_eq!(inner, html, "{markdown:?}");
    }

    #[test]
    fn markdown_becomes_the_tags_it_means() {
        check(
            "Use `retry()` **twice**,\nnot *once*.",
            "<p>Use <code>retry()</code> <strong>twice</strong>,\nnot <em>once</em>.</p>",
        );
        check(
            "# Title\n\n- a\n- b\n\n3. c",
            "<h3>Title</h3><ul><li>a</li><li>b</li></ul><ol start=\"3\"><li>c</li></ol>",
        );
        check(
            "| a | b |\n|---|---|\n| 1 | 2 |",
            "<div class=\"scroll\"><table><thead><tr><th>a</th><th>b</th></tr></thead>\
             <tbody><tr><td>1</td><td>2</td></tr></tbody></table></div>",
        );
        check(
            "> ~~old~~",
            "<blockquote><p><del>old</del></p></blockquote>",
        );
        check(
            "```rust\nlet x = 1;\n```",
            "<pre class=\"md-code\"><code><i class=\"k\">let</i> x = \
             <i class=\"n\">1</i>;\n</code></pre>",
        );
    }

    #[test]
    fn raw_html_is_text_and_links_are_not_links() {
        check(
            "<img src=x onerror=alert(1)>",
            "<p class=\"html\">&lt;img src=x onerror=alert(1)&gt;</p>",
        );
        check(
            "a <b onclick=x>b</b> c",
            "<p>a &lt;b onclick=x&gt;b&lt;/b&gt; c</p>",
        );
        check(
            "[docs](javascript:alert(1)) and <https://example.com/x>",
            "<p>docs <span class=\"mono dest\">(javascript:alert(1))</span> and \
             https://example.com/x</p>",
        );
        check(
            "![logo](http://127.0.0.1:9/x.png \"t\")",
            "<p><span class=\"image\">image: logo <span class=\"mono dest\">\
             (http://127.0.0.1:9/x.png)</span></span></p>",
        );
        check(
            "```\n</code></pre><script>x</script>\n```",
            "<pre class=\"md-code\"><code>&lt;/code&gt;&lt;/pre&gt;&lt;script&gt;x&lt;/script&gt;\n\
             </code></pre>",
        );
        check(
            "[a\"><script>](http://x/\"><script>)",
            "<p>a&quot;&gt;&lt;script&gt; <span class=\"mono dest\">\
             (http://x/&quot;&gt;&lt;script&gt;)</span></p>",
        );
    }

    #[test]
    fn no_input_makes_an_unescaped_angle_bracket_or_attribute() {
        let hostile = [
            "<script>alert(1)</script>",
            "<a href='javascript:x'>y</a>",
            "[x](<javascript:alert(1)>)",
            "<details open ontoggle=alert(1)>",
            "`</code><img>`",
            "| <img> |\n|---|\n| <svg onload=x> |",
            "<!-- <img> -->",
            "[^1]\n\n[^1]: <img>",
        ];
        for input in hostile {
            let html = render(input).into_string();
            for bad in ["<script", "<img", "<a ", "<svg", "<details", "<!--"] {
                assert!(!html.contains(bad), "{input:?} → {html}");
            }
        }
    }
}
