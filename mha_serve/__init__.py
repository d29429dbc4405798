"""mha_serve: serving the mha_core dashboard to a class. Not part of the lesson.

``mha_core`` is the course a student opens; this package is what a teacher's server runs around
it (Voila, Jupyter Server, JupyterHub). It imports ``mha_core``; ``mha_core`` never imports it
(``tests/test_architecture.py`` checks both).

    kernels       BoundedKernelManager            a cap on live kernels, no orphans, pool warming
                                                  (named in etc/jupyter/voila.json and
                                                  jupyter_server_config.json)
    classroom     classroom_plan, classroom       a pool sized to the class, warmed before the bell
                                                  (``python -m mha_serve classroom --seats 60``)
    websocket     GuardedKernelConnection         a kernel websocket one client cannot stall the
                                                  server with: v1 protocol only, frames checked,
                                                  queued bytes bounded (kernel_websocket_connection_class)
    room          RoomVoila (room_app_class),     the dashboard on the room's network behind a join
                  Gatekeeper                      code, its QR code and the projector page
                                                  (``python -m mha_serve.room``, ``make dashboard ROOM=1``)
    preflight     run_checks                      the pre-class check, each failure with its fix
                                                  (``python -m mha_serve.preflight``, ``make preflight``)
    install       install_jupyter_files           the offline templates and settings into the
                                                  environment (``python -m mha_serve``)
    shared_cache  shared                          results on disk, shared by every kernel: the
                                                  dashboard passes it to its panels (``cache=shared``)

Nothing is imported here, so a dashboard kernel that reads the shared cache does not load
Jupyter Server or Tornado.
"""
