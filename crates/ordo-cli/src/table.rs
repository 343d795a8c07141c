//! Aligned text tables: headers, columns padded to their widest cell,
//! numbers right-aligned, no trailing spaces.

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

/// The gap between columns.
const GAP: &str = "  ";

impl Table {
    pub(crate) fn new(columns: &[(&'static str, Align)]) -> Self {
        Self {
            columns: columns.to_vec(),
            rows: Vec::new(),
        }
    }

    /// Adds a row; missing cells are blank, extra cells are dropped.
    pub(crate) fn row(&mut self, cells: Vec<String>) {
        self.rows.push(cells);
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }

    /// The table as lines of text, each ending in a newline.
    pub(crate) fn render(&self) -> String {
        let widths: Vec<usize> = self
            .columns
            .iter()
            .enumerate()
            .map(|(i, (header, _))| {
                self.rows
                    .iter()
                    .filter_map(|row| row.get(i))
                    .map(|cell| cell.chars().count())
                    .chain([header.chars().count()])
                    .max()
                    .unwrap_or(0)
            })
            .collect();
        let headers: Vec<String> = self.columns.iter().map(|(h, _)| (*h).to_owned()).collect();
        let mut out = String::new();
        for row in std::iter::once(&headers).chain(&self.rows) {
            let mut line = String::new();
            for (i, ((_, align), width)) in self.columns.iter().zip(&widths).enumerate() {
                let cell = row.get(i).map(String::as_str).unwrap_or("");
                if i > 0 {
                    line.push_str(GAP);
                }
                let pad = width.saturating_sub(cell.chars().count());
                match align {
                    Align::Left => {
                        line.push_str(cell);
                        line.extend(std::iter::repeat_n(' ', pad));
                    }
                    Align::Right => {
                        line.extend(std::iter::repeat_n(' ', pad));
                        line.push_str(cell);
                    }
                }
            }
            out.push_str(line.trim_end());
            out.push('\n');
        }
        out
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
}
