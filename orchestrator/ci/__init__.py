"""The CI runners' front doors: every job step one governed execution.

Controller side: ``jobs`` (a CI job: its context, image, workspace and steps; served as ``/v1/ci/jobs``) and
``github`` (the Actions runner's container-hook protocol, answered by the controller; the hook file the runner
runs, ``github/hook.js``, only forwards). Runner side: ``gitlab`` (the custom executor's driver, run by
``sandboxctl ci gitlab``), a client of the API like the hook.
"""
