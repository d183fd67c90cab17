// server/client_conn: the connection's socket is found by its 4-tuple among all the process's
// sockets (the oracle is the descriptor accept() returned), and gone() tells a live connection
// (idle, or with unread pipelined bytes) from one the peer closed, half-closed or reset.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "server/client_conn.h"

using namespace tetra;

namespace {

int port_of(int fd, bool peer) {
    sockaddr_in a{};
    socklen_t len = sizeof(a);
    int rc = peer ? getpeername(fd, reinterpret_cast<sockaddr*>(&a), &len) : getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
    EXPECT_EQ(rc, 0);
    return ntohs(a.sin_port);
}

// A loopback TCP connection whose both ends belong to this process.
struct tcp_pair {
    int listener = -1, client = -1, server = -1;
    tcp_pair() {
        listener = socket(AF_INET, SOCK_STREAM, 0);
        sockaddr_in a{};
        a.sin_family = AF_INET;
        a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        EXPECT_EQ(bind(listener, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
        EXPECT_EQ(listen(listener, 4), 0);
        a.sin_port = htons(uint16_t(port_of(listener, false)));
        client = socket(AF_INET, SOCK_STREAM, 0);
        EXPECT_EQ(connect(client, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
        server = accept(listener, nullptr, nullptr);
        EXPECT_GE(server, 0);
    }
    ~tcp_pair() {
        for (int fd : {listener, client, server})
            if (fd >= 0) close(fd);
    }
    client_connection find() const {
        return client_connection::find("127.0.0.1", port_of(server, false), "127.0.0.1", port_of(server, true));
    }
};

// The peer's FIN or RST reaches the other end asynchronously; give it up to 2 s.
bool becomes_gone(const client_connection& c) {
    for (int i = 0; i < 200; ++i) {
        if (c.gone()) return true;
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return false;
}

}  // namespace

TEST(client_conn, finds_the_accepted_socket_not_the_client_end) {
    tcp_pair p;
    client_connection c = p.find();
    ASSERT_TRUE(c.found());
    EXPECT_EQ(c.fd(), p.server);
    EXPECT_FALSE(c.gone());
    // the same addresses with another port, or reversed (the client's end), name no server socket here
    EXPECT_FALSE(client_connection::find("127.0.0.1", port_of(p.server, false), "127.0.0.1", port_of(p.server, true) + 1).found());
    EXPECT_EQ(client_connection::find("127.0.0.1", port_of(p.client, false), "127.0.0.1", port_of(p.client, true)).fd(), p.client);
    EXPECT_FALSE(client_connection::find("::1", port_of(p.server, false), "127.0.0.1", port_of(p.server, true)).found());
}

TEST(client_conn, not_found_is_never_gone) {
    client_connection c;
    EXPECT_FALSE(c.found());
    EXPECT_FALSE(c.gone());
}

TEST(client_conn, pipelined_bytes_are_not_a_hangup_and_stay_unread) {
    tcp_pair p;
    client_connection c = p.find();
    ASSERT_EQ(c.fd(), p.server);
    ASSERT_EQ(write(p.client, "GET /", 5), 5);
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    EXPECT_FALSE(c.gone());
    EXPECT_FALSE(c.gone());
    char buf[8] = {};
    ASSERT_EQ(read(p.server, buf, sizeof(buf)), 5);
    EXPECT_EQ(std::string(buf, 5), "GET /");
}

TEST(client_conn, close_is_a_hangup) {
    tcp_pair p;
    client_connection c = p.find();
    ASSERT_EQ(c.fd(), p.server);
    close(p.client);
    p.client = -1;
    EXPECT_TRUE(becomes_gone(c));
}

TEST(client_conn, close_after_sending_bytes_is_a_hangup) {
    tcp_pair p;
    client_connection c = p.find();
    ASSERT_EQ(c.fd(), p.server);
    ASSERT_EQ(write(p.client, "xy", 2), 2);
    close(p.client);
    p.client = -1;
    EXPECT_TRUE(becomes_gone(c));
}

TEST(client_conn, reset_is_a_hangup) {
    tcp_pair p;
    client_connection c = p.find();
    ASSERT_EQ(c.fd(), p.server);
    linger l{1, 0};  // close() sends RST
    ASSERT_EQ(setsockopt(p.client, SOL_SOCKET, SO_LINGER, &l, sizeof(l)), 0);
    close(p.client);
    p.client = -1;
    EXPECT_TRUE(becomes_gone(c));
}

TEST(client_conn, half_close_is_a_hangup) {
    tcp_pair p;
    client_connection c = p.find();
    ASSERT_EQ(c.fd(), p.server);
    ASSERT_EQ(shutdown(p.client, SHUT_WR), 0);
    EXPECT_TRUE(becomes_gone(c));
}
