"""No models: Conveyor's tables are its own (`manage.py conveyor migrate`).

The module's presence makes Django send `post_migrate` for this app whenever it
migrates a database, which `conveyor.django.testing.ConveyorTestRunner` waits for to
add Conveyor's tables to a test database before `--parallel` copies it, in a
project whose other apps have no models either.
"""
