"""A front end: the report on a console, as text (rich where the terminal takes it) or JSON
(``render``). Imports the runner layer and below; never another front end."""
