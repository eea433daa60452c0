import streamlit as st

st.title("calls (coming)")
