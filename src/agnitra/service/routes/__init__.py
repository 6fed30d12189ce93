"""The API's routes, one module a resource; `app.create_app` includes every router listed here."""
