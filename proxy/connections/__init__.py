"""The HTTP layer under the app: uvicorn's protocol with the limits a server facing clients needs
(the request head's size and time, slow bodies, pipelining, how many connections are open), and its
flow control. The app never imports it; the command installs it into uvicorn."""
