"""A matrix file -> a Matrix of Cells: strict YAML reading, presets, fio job files, expansion."""
