//! Reports: terminal and markdown tables, HTML and SVG plots; input is summaries only.
