// server/client_conn: the socket of the HTTP connection a request came in on, so a handler that
// waits (a non-streaming generation) notices the client hanging up. cpp-httplib 0.11 gives handlers
// neither the socket nor a disconnect callback, so the socket is found by the connection's address
// 4-tuple, which is unique among the process's open TCP sockets; httplib keeps it open until the
// handler has returned and its response is written, so the descriptor stays valid meanwhile.
#pragma once
#include <string>

namespace tetra {

class client_connection {
public:
    client_connection() = default;
    // Addresses as numeric host strings (getnameinfo NI_NUMERICHOST, as httplib's Request holds
    // them). Not found (no /proc/self/fd, or no such socket): found() is false, gone() never true.
    static client_connection find(const std::string& local_addr, int local_port, const std::string& remote_addr,
                                  int remote_port);
    bool found() const { return fd_ >= 0; }
    int fd() const { return fd_; }
    // Without blocking: true once the peer closed (FIN, including a half-close) or reset the
    // connection. Bytes the client sent meanwhile (a pipelined request) are left unread and are not
    // a hang-up.
    bool gone() const;

private:
    int fd_ = -1;
};

}  // namespace tetra
