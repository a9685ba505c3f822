"""The HTTP server: the app's routes and middleware, the request pipeline, the client's side of
the wire (body limits, the request-head limit, logs). The top layer: it may import every other.
"""
