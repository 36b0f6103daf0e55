"""`caption compare`'s parts: the models (`models`), the report table (`table`) and the figures (`figures`)."""
