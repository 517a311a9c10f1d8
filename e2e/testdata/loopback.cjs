// Preloaded (NODE_OPTIONS="--require …/loopback.cjs") into a server that calls listen(port) without a
// host, which binds every interface: such a listen binds 127.0.0.1 instead, so that a test's server is
// reachable from this machine only. A listen that names a host, a path or a handle is left alone.
"use strict";
const net = require("net");

const listen = net.Server.prototype.listen;
net.Server.prototype.listen = function (...args) {
  const first = args[0];
  if (first !== null && typeof first === "object") {
    // listen({port, host?, path?, handle?, fd?}, cb?)
    if (first.host === undefined && first.path === undefined && first.handle === undefined && first.fd === undefined && !(first instanceof net.Server) && first._handle === undefined) {
      args[0] = { ...first, host: "127.0.0.1" };
    }
  } else if (args.length === 0 || typeof first === "function" || typeof first === "number" || (typeof first === "string" && /^\d+$/.test(first))) {
    // listen(), listen(cb), listen(port, [host], [backlog], [cb])
    if (args.length === 0 || typeof first === "function") {
      args.unshift(0);
    }
    if (typeof args[1] !== "string") {
      args.splice(1, 0, "127.0.0.1");
    }
  }
  return listen.apply(this, args);
};
