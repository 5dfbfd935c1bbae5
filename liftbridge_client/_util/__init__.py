"""Small helpers shared by the public modules and the packages beside this one.

`validate` (every check of a caller's value), `option_fields` (the `Seconds` duration
fields of the frozen option dataclasses), `tasks` (`TaskSupervisor`: the client's
background tasks in one anyio task group).
"""
