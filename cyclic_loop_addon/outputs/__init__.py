"""Everything a loop is written to: shape keys, Alembic, PC2, VAT, glTF, the web page, and file safety."""
