"""The HTML report: self-contained static pages of a run, a comparison and an archive."""
