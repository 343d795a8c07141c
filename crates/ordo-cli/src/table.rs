//! Aligned text tables: headers, columns padded to their widest cell,
//! numbers right-aligned, no borders and no trailing spaces (what a person
//! reads and `awk` splits). Laid out by `comfy-table`.

use comfy_table::{CellAlignment, ContentArrangement, presets};

use crate::format;

/// How a column's cells are aligned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Align {
    Left,
    Right,
}

/// A table being built.
#[derive(Debug)]
pub(crate) struct Table {
    columns: Vec<(&'static str, Align)>,
    rows: Vec<Vec<String>>,
}

/// The gap between columns, in spaces.
const GAP: u16 = 2;

impl Table {
    pub(crate) fn new(columns: &[(&'static str, Align)]) -> Self {
        Self {
            columns: columns.to_vec(),
            rows: Vec::new(),
        }
    }

    /// Adds a row; missing cells are blank, extra cells are dropped.
    pub(crate) fn row(&mut self, mut cells: Vec<String>) {
        cells.resize(self.columns.len(), String::new());
        self.rows.push(cells);
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }

    /// The table as lines of text, each ending in a newline.
    pub(crate) fn render(&self) -> String {
        let mut table = comfy_table::Table::new();
        // No borders, never wrapped to the terminal's width: piped output
        // and a terminal's read the same.
        table
            .load_preset(presets::NOTHING)
            .set_content_arrangement(ContentArrangement::Disabled)
            .set_header(self.columns.iter().map(|(header, _)| *header))
            // Every cell escaped: it may hold text from Redis.
            .add_rows(
                self.rows
                    .iter()
                    .map(|row| row.iter().map(|cell| format::text(cell).into_owned())),
            );
        let last = self.columns.len().saturating_sub(1);
        for (i, (_, align)) in self.columns.iter().enumerate() {
            if let Some(column) = table.column_mut(i) {
                column.set_padding((0, if i == last { 0 } else { GAP }));
                column.set_cell_alignment(match align {
                    Align::Left => CellAlignment::Left,
                    Align::Right => CellAlignment::Right,
                });
            }
        }
        table
            .lines()
            .map(|line| format!("{}\n", line.trim_end()))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn columns_align_to_the_widest_cell() {
        let mut table = Table::new(&[
            ("KEY", Align::Left),
            ("LAG", Align::Right),
            ("ERROR", Align::Left),
        ]);
        table.row(vec!["alice".into(), "0".into(), String::new()]);
        table.row(vec!["bob".into(), "1234".into(), "poison".into()]);
        assert_eq!(
            table.render(),
            "KEY     LAG  ERROR\n\
             alice     0\n\
             bob    1234  poison\n"
        );
    }

    #[test]
    fn cells_are_escaped() {
        let mut table = Table::new(&[("KEY", Align::Left), ("ERROR", Align::Left)]);
        table.row(vec!["a".into(), "\x1b[2J\nforged".into()]);
        assert_eq!(table.render(), "KEY  ERROR\na    \\u{1b}[2J\\nforged\n");
    }
}
